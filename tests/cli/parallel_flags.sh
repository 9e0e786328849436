#!/usr/bin/env bash
# vLLM's parallel flags on the commands that run a model: sizes above one device are refused
# before anything loads, naming the flag and why (DeepSeek-V4's one KV head for tensor
# parallelism; multi-device serving not built yet for data parallelism), a size of 0 is a usage
# error, and the one-device spelling (sizes 1, --enable-expert-parallel) runs.
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
if run --data-parallel-size 4 --enable-expert-parallel; then fail "--data-parallel-size 4 was accepted"; fi
grep -q -- "--data-parallel-size 4: .*one device" "$work/err.txt" || fail "the refusal: $(cat "$work/err.txt")"
if run --tensor-parallel-size 0; then fail "--tensor-parallel-size 0 was accepted"; fi
grep -q -- "--tensor-parallel-size" "$work/err.txt" || fail "the size-0 error does not name the flag: $(cat "$work/err.txt")"
run --tensor-parallel-size 1 --data-parallel-size 1 --enable-expert-parallel || fail "one device: $(cat "$work/err.txt")"
for command in generate logits "bench step" "bench throughput"; do
  # shellcheck disable=SC2086
  "$dsv4" $command --help >"$work/help.txt" 2>&1 || fail "$command --help"
  grep -q -- "--tensor-parallel-size" "$work/help.txt" || fail "$command --help has no --tensor-parallel-size"
done
echo "parallel flags: ok"
