#!/usr/bin/env bash
# Runs on the GPU machine (the device tool, with the bundle of scripts/gpu_bundle.sh unpacked):
# `dsv4 serve` at V4-Flash geometry (dummy weights, layers of one kind sharing them, so the whole
# model fits one H200) and `dsv4 bench serve` against it at each concurrency, vLLM's JSON of each
# run into $OUT. The serving benchmark of the server issue: concurrency 1, 16 and 64, 8k in / 1k out.
# Environment: CONCURRENCY (default "1 16 64"), INPUT_LEN (8192), OUTPUT_LEN (1024), PREFIX_LEN (0:
# tokens of INPUT_LEN every prompt shares, for prefix caching), PROMPTS_PER
# (prompts per unit of concurrency, default 2; at least 2 prompts), SERVE_FLAGS (extra serve flags,
# e.g. --no-enable-prefix-caching, or --data-parallel-size 2 --enable-expert-parallel on two GPUs),
# SHARE_LAYERS (default --dummy-share-layers; empty: every layer its own weights, the whole model,
# which needs two H200s with data parallelism), MODEL (default flash), DEVICE (cuda),
# DSV4 and TOKENIZER (the binary and tokenizer.json, default: beside this script).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=${OUT:-$here/gpu-out}
mkdir -p "$out"
concurrency=${CONCURRENCY:-1 16 64}
input=${INPUT_LEN:-8192}
output=${OUTPUT_LEN:-1024}
per=${PROMPTS_PER:-2}
dsv4=${DSV4:-$here/dsv4}
tokenizer=${TOKENIZER:-$here/tokenizer.json}
max_seqs=0
for c in $concurrency; do [ "$c" -gt "$max_seqs" ] && max_seqs=$c; done
port=8123
"$dsv4" serve --model "${MODEL:-flash}" --load-format dummy ${SHARE_LAYERS---dummy-share-layers} --device "${DEVICE:-cuda}" \
  --tokenizer "$tokenizer" --served-model-name flash --port $port \
  --max-model-len $((input + output)) --max-num-seqs "$max_seqs" ${SERVE_FLAGS:-} >"$out/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "serve exited:"; tail -n 5 "$out/serve.log"; exit 1; }
  sleep 1
done
status=0
for c in $concurrency; do
  prompts=$((c * per < 2 ? 2 : c * per))
  echo "== bench serve: concurrency $c, $prompts prompts, $input in / $output out"
  "$dsv4" bench serve --base-url "http://127.0.0.1:$port" --model flash --tokenizer "$tokenizer" \
    --dataset-name random --random-prefix-len "${PREFIX_LEN:-0}" --random-input-len "$((input - ${PREFIX_LEN:-0}))" \
    --random-output-len "$output" --num-prompts "$prompts" \
    --max-concurrency "$c" --ignore-eos --save-result --result-dir "$out" 2>&1 | tee "$out/bench_serve_c$c.txt" || status=1
done
curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics.txt" || true
exit $status
