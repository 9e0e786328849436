#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool, with .dev/gpu carried): every GPU test
# binary, then compute-sanitizer's memcheck, racecheck and synccheck over them. Logs go to
# $OUT (or ./gpu-out); then the benchmarks, whose tables go to $OUT/bench_*.txt. Exit status is non-zero if any step failed. Tests named *ErrorPath*
# provoke CUDA errors on purpose, so the sanitizer runs leave them out.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=${OUT:-$here/gpu-out}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
# The model tests and the generate checks need the tiny checkpoint: make it here (seconds).
model=/tmp/dsv4-tiny
"$here/dsv4" make-model --preset tiny --seed 1 --out "$model" --force 2>/dev/null || status=1
export DSV4_TINY_MODEL=$model
for t in "$here"/test_*; do
  name=$(basename "$t")
  echo "== $name"
  "$t" --gtest_output="xml:$out/$name.xml" 2>&1 | tee "$out/$name.log" | grep -E "^\[measure\]|FAILED|Failure|PASSED" || true
  grep -q "^\[  PASSED  \]" "$out/$name.log" && ! grep -q "^\[  FAILED  \]" "$out/$name.log" || status=1
  # The model test runs the whole CPU reference beside the GPU; the sanitizers cover the GPU ops
  # through the op tests and the model through generate (below).
  [[ $name == test_model_* ]] && continue
  for tool in memcheck racecheck synccheck; do
    # racecheck cannot run cuBLASLt's Hopper kernels (nvjet_*: it reports their asynchronous
    # copies as shared-memory hazards, or fails with an internal error when they are excluded by
    # name), so the tests that reach cuBLASLt are checked by memcheck and synccheck only.
    filter='-*ErrorPath*'
    [ "$tool" = racecheck ] && filter='-*ErrorPath*:*Fp8Gemm*:*TensorCores*:*Mxfp4*:*DefaultFp8*:*RunsRepeat*'
    compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" --gtest_filter="$filter" >"$out/$name.$tool.log" 2>&1
    rc=$?
    echo "   compute-sanitizer $tool: rc=$rc ($(tail -n 1 "$out/$name.$tool.log"))"
    [ $rc -eq 0 ] || status=1
  done
done
# generate on the GPU: greedy ids against the CPU's, timings, and memcheck over a short run.
prompt=$(seq -s, 1000 37 5000)
echo "== generate"
"$here/dsv4" generate --model "$model" --prompt-ids "$prompt" -n 32 --ignore-eos --device cuda --stats 2>&1 | tee "$out/generate_cuda.txt" || status=1
"$here/dsv4" generate --model "$model" --prompt-ids "$prompt" -n 32 --ignore-eos --device cpu 2>&1 | tee "$out/generate_cpu.txt" || status=1
compute-sanitizer --tool memcheck --error-exitcode 1 "$here/dsv4" generate --model "$model" --prompt-ids "$prompt" \
  -n 4 --device cuda >"$out/generate.memcheck.log" 2>&1
rc=$?
echo "   compute-sanitizer memcheck (generate): rc=$rc ($(tail -n 1 "$out/generate.memcheck.log"))"
[ $rc -eq 0 ] || status=1
for b in "$here"/bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  echo "== $name"
  "$b" 2>&1 | tee "$out/$name.txt" || status=1
done
exit $status
