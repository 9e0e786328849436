#!/usr/bin/env bash
# vLLM's parallel flags on the commands that run a model: tensor parallelism above 1 is refused
# before anything loads, naming the flag and why (DeepSeek-V4's one KV head); data parallelism
# runs two ranks on the CPU with expert parallelism and is refused by name without it, with
# --device cuda where there are no two GPUs, for experts that do not split, and on commands other
# than serve and bench throughput; a size of 0 is a usage error, and the one-device spelling (sizes 1,
# --enable-expert-parallel) runs.
set -euo pipefail
dsv4=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {
  "$dsv4" bench throughput --model tiny --load-format dummy --num-prompts 1 --input-len 8 --output-len 2 \
    --threads 2 "$@" >"$work/out.txt" 2>"$work/err.txt"
}
if run --tensor-parallel-size 2; then fail "--tensor-parallel-size 2 was accepted"; fi
grep -q -- "--tensor-parallel-size 2: .*one KV head" "$work/err.txt" || fail "the refusal: $(cat "$work/err.txt")"
if grep -q "dummy weights" "$work/err.txt"; then fail "the model loaded before the refusal: $(cat "$work/err.txt")"; fi
if run --data-parallel-size 2; then fail "--data-parallel-size 2 without expert parallelism was accepted"; fi
grep -q -- "--data-parallel-size 2 needs --enable-expert-parallel" "$work/err.txt" || fail "the refusal: $(cat "$work/err.txt")"
if grep -q "dummy weights" "$work/err.txt"; then fail "the model loaded before the refusal: $(cat "$work/err.txt")"; fi
# Without a GPU (CI) or a CUDA build, CUDA ranks are refused saying why.
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  if run --data-parallel-size 2 --enable-expert-parallel --device cuda; then fail "--device cuda with 2 ranks ran without 2 GPUs"; fi
  grep -qE -- "no CUDA backend|no CUDA device|GPU 1 does not exist" "$work/err.txt" || fail "the refusal: $(cat "$work/err.txt")"
fi
if run --data-parallel-size 3 --enable-expert-parallel; then fail "the tiny preset's 8 experts over 3 ranks were accepted"; fi
grep -q -- "routed experts (n_routed_experts) do not split over 3 ranks" "$work/err.txt" || fail "the refusal: $(cat "$work/err.txt")"
run --data-parallel-size 2 --enable-expert-parallel || fail "two ranks: $(cat "$work/err.txt")"
grep -q "cache on each of 2 data-parallel ranks" "$work/err.txt" || fail "no per-rank cache line: $(cat "$work/err.txt")"
grep -q "max_model_len [0-9]* (each of 2 data-parallel ranks)" "$work/err.txt" || fail "no per-rank limits: $(cat "$work/err.txt")"
grep -q "Successful requests: *1" "$work/out.txt" || fail "two ranks served no request: $(cat "$work/out.txt")"
# bench step over two ranks: every rank's prefill, then decode rows of b sequences a rank, in JSON too.
"$dsv4" bench step --model tiny --context 64 --batch 1,2 --iters 1 --repeats 1 --threads 2 --data-parallel-size 2 \
  --enable-expert-parallel --json "$work/step.json" >"$work/out.txt" 2>"$work/err.txt" || fail "bench step on 2 ranks: $(cat "$work/err.txt")"
grep -q "2 data-parallel ranks of the cpu backend" "$work/out.txt" || fail "bench step header: $(cat "$work/out.txt")"
grep -q "^decode b=2x2 " "$work/out.txt" || fail "bench step rows: $(cat "$work/out.txt")"
python3 - "$work/step.json" <<'PY' || fail "bench step JSON"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["data_parallel_size"] == 2, r
decode = [row for row in r["rows"] if row["run"] == "decode"]
assert [row["batch_per_rank"] for row in decode] == [1, 2] and all(row["ms"] > 0 for row in decode), r["rows"]
PY
if "$dsv4" generate --model tiny --load-format dummy --prompt-ids 1,2 --max-new-tokens 1 --data-parallel-size 2 \
  --enable-expert-parallel >"$work/out.txt" 2>"$work/err.txt"; then fail "generate ran 2 ranks"; fi
grep -q -- "--data-parallel-size 2: only serve, bench throughput and bench step" "$work/err.txt" || fail "the refusal: $(cat "$work/err.txt")"
if run --tensor-parallel-size 0; then fail "--tensor-parallel-size 0 was accepted"; fi
grep -q -- "--tensor-parallel-size" "$work/err.txt" || fail "the size-0 error does not name the flag: $(cat "$work/err.txt")"
run --tensor-parallel-size 1 --data-parallel-size 1 --enable-expert-parallel || fail "one device: $(cat "$work/err.txt")"
for command in generate logits "bench step" "bench throughput"; do
  # shellcheck disable=SC2086
  "$dsv4" $command --help >"$work/help.txt" 2>&1 || fail "$command --help"
  grep -q -- "--tensor-parallel-size" "$work/help.txt" || fail "$command --help has no --tensor-parallel-size"
done
echo "parallel flags: ok"
