#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool, with .dev/gpu carried): every GPU test
# binary, then compute-sanitizer's memcheck, racecheck and synccheck over them, then generate's and
# bench sampling's GPU-against-CPU checks. Logs go to $OUT (or ./gpu-out); then the benchmarks (bench_fp8_gemm, dsv4 bench layers), whose tables go to
# $OUT/bench_*.txt. Exit status is non-zero if any step failed. Tests named *ErrorPath*
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
# The CPU reference's kernel family, the same on every host (AVX2, which every x86-64 GPU host
# has): each family sums in its own order, which moves the GPU-vs-CPU figures as much as their
# margins (tests/model/test_model_cuda.cpp). A caller's own OPENBLAS_CORETYPE wins.
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
# GPU_TESTS (binary names or globs, space-separated, default test_*) picks the test binaries to
# run; GPU_SANITIZE=0 skips the compute-sanitizer runs and GPU_BENCH=0 the benchmarks, for quick
# iterations (a full run takes about seven minutes); GPU_SANITIZE_LIMIT (seconds, default 150)
# bounds each sanitizer run, and a run that hits it counts as failed (rc 124).
sanitize=${GPU_SANITIZE:-1}
bench=${GPU_BENCH:-1}
# Each name or glob is taken beside this script (read, so that no glob expands in the caller's folder).
read -ra test_patterns <<<"${GPU_TESTS:-test_*}"
tests=()
for pattern in "${test_patterns[@]}"; do tests+=("$here"/$pattern); done
for t in "${tests[@]}"; do
  name=$(basename "$t")
  echo "== $name"
  "$t" --gtest_output="xml:$out/$name.xml" 2>&1 | tee "$out/$name.log" | grep -E "^\[measure\]|FAILED|Failure|PASSED" || true
  grep -q "^\[  PASSED  \]" "$out/$name.log" && ! grep -q "^\[  FAILED  \]" "$out/$name.log" || status=1
  # On the GPU machine nothing may skip (a test that skipped here did not test the GPU), except
  # the tests of the no-device path (*NoDevice*), which skip where a device is present, and on a
  # machine of one GPU the tests that need two (*TwoGpus*).
  exempt='NoDevice'
  [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ] && exempt='NoDevice\|TwoGpus'
  skipped=$(grep '^\[  SKIPPED \] [A-Za-z]' "$out/$name.log" | grep -vc "$exempt" || true)
  if [ "$skipped" -gt 0 ]; then
    echo "   skipped on the GPU machine: $skipped tests"
    status=1
  fi
  # The model test runs the whole CPU reference beside the GPU; the sanitizers cover the GPU ops
  # through the op tests and the model through generate (below); the expert-parallel ranks get
  # memcheck of their own (below).
  [[ $name == test_model_* || $name == test_expert_parallel_cuda ]] && continue
  [ "$sanitize" = 1 ] || continue
  for tool in memcheck racecheck synccheck; do
    # racecheck cannot run cuBLASLt's Hopper kernels (nvjet_*: it reports their asynchronous
    # copies as shared-memory hazards, or fails with an internal error when they are excluded by
    # name), so the tests that reach cuBLASLt are checked by memcheck and synccheck only.
    # The 42-shape simple_gemm sweep (hundreds of launches per shape) is left to the plain run;
    # its kernels are covered here by SimpleGemmCudaBf16Out and SimpleGemmCudaLongK.
    filter='-*ErrorPath*:Shapes/SimpleGemmCuda.*'
    # The host-reference sweeps of fp8_mma_gemm and the long-K simple_gemm case ran past a minute
    # under racecheck; their shared-memory use is covered by the row-identity tests. The
    # indexer's 1024-token prefill (~30k key tiles) likewise; its kernels' shared memory is
    # covered by the decode and toy cases.
    # The staged FP8 GEMM's sweep likewise: its small first shape (and the grouped test) stay in.
    # The 1,408-row draw at V4's vocabulary likewise: the sampling kernels' shared memory is
    # covered by SampledRowsOfEveryKindInASmallVocabulary.
    [ "$tool" = racecheck ] && filter='-*ErrorPath*:*Fp8Gemm*:*TensorCores*:*Mxfp4*:*DefaultFp8*:*RunsRepeat*:Shapes/SimpleGemmCuda.*:*Fp8MmaGemmCuda.MatchesHostReference*:SimpleGemmCudaLongK*:*Prefill1024*:*StreamedDense/m1*:*StreamedDense/m2*:*StreamedDense/m3*:*StreamedDense/m4*:*StreamedDense/m5*:*StreamedDense/m65*:*StreamedDense/m7*:*SampledRowsMatchTheCpu*'
    # The sanitizers serialise kernels, so a test that needs two streams to run at once (a side
    # task waiting for the main task's flag) would time out under them.
    filter="$filter:*Concurrently*"
    # A time limit per run, so one slow sanitizer run cannot take the whole device session.
    timeout "${GPU_SANITIZE_LIMIT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" --gtest_filter="$filter" \
      >"$out/$name.$tool.log" 2>&1
    rc=$?
    echo "   compute-sanitizer $tool: rc=$rc ($(tail -n 1 "$out/$name.$tool.log"))"
    [ $rc -eq 0 ] || status=1
  done
done
# The multi-stream model test's short case under memcheck and synccheck (the loop above leaves the
# model tests out): side streams, fork/join events and stream-ordered allocations in a whole
# forward. Not racecheck: it checks shared memory within a kernel, which the op tests cover, and
# takes over five minutes on a whole forward.
t="$here/test_model_multistream_cuda"
if [ -x "$t" ] && [ "$sanitize" = 1 ]; then
  for tool in memcheck synccheck; do
    timeout "${GPU_SANITIZE_LIMIT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" --gtest_filter='*ShortRun*' \
      >"$out/test_model_multistream_cuda.$tool.log" 2>&1
    rc=$?
    echo "   compute-sanitizer $tool (multi-stream model, short run): rc=$rc ($(tail -n 1 "$out/test_model_multistream_cuda.$tool.log"))"
    [ $rc -eq 0 ] || status=1
  done
fi
# Two expert-parallel ranks on one GPU under memcheck: each rank's stream copies rows out of the
# other's device memory (the in-process exchange), which must be written and still live.
t="$here/test_expert_parallel_cuda"
if [ -x "$t" ] && [ "$sanitize" = 1 ]; then
  timeout "${GPU_SANITIZE_LIMIT:-150}" compute-sanitizer --tool memcheck --error-exitcode 1 "$t" \
    --gtest_filter='*TwoRanksOnOneGpu*' >"$out/test_expert_parallel_cuda.memcheck.log" 2>&1
  rc=$?
  echo "   compute-sanitizer memcheck (two expert-parallel ranks on one GPU): rc=$rc ($(tail -n 1 "$out/test_expert_parallel_cuda.memcheck.log"))"
  [ $rc -eq 0 ] || status=1
fi
# Decode steps as CUDA graphs under memcheck and synccheck: captures, replays, graph-kept tables
# and the graph's own allocations over random sets of sequences, side streams inside the graph;
# the engine's GPU tests likewise (67 s for both on the H200, session 35); and memcheck over 2,000
# replays of the engine's padded decode steps of random sizes (their own time limit:
# GPU_GRAPH_REPLAYS_LIMIT seconds, default 600).
t="$here/test_model_graphs_cuda"
if [ -x "$t" ] && [ "$sanitize" = 1 ]; then
  for tool in memcheck synccheck; do
    timeout "${GPU_SANITIZE_LIMIT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" \
      --gtest_filter='*RandomSequenceSets*/on' >"$out/test_model_graphs_cuda.$tool.log" 2>&1
    rc=$?
    echo "   compute-sanitizer $tool (CUDA graphs, random sequence sets): rc=$rc ($(tail -n 1 "$out/test_model_graphs_cuda.$tool.log"))"
    [ $rc -eq 0 ] || status=1
  done
  # The serving engine on the GPU (the runtime's CUDA tests: eager and graph tokens, prefix-cache
  # hits, padded decode steps) under both tools too.
  for tool in memcheck synccheck; do
    timeout "${GPU_SANITIZE_LIMIT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" \
      --gtest_filter='*Engine*:-*TwoThousand*' >"$out/test_model_graphs_cuda.engine.$tool.log" 2>&1
    rc=$?
    echo "   compute-sanitizer $tool (the engine's GPU tests): rc=$rc ($(tail -n 1 "$out/test_model_graphs_cuda.engine.$tool.log"))"
    [ $rc -eq 0 ] || status=1
  done
  timeout "${GPU_GRAPH_REPLAYS_LIMIT:-600}" compute-sanitizer --tool memcheck --error-exitcode 1 "$t" \
    --gtest_filter='*TwoThousandPaddedReplays*/on' >"$out/test_model_graphs_cuda.replays.memcheck.log" 2>&1
  rc=$?
  echo "   compute-sanitizer memcheck (2,000 padded graph replays): rc=$rc ($(tail -n 1 "$out/test_model_graphs_cuda.replays.memcheck.log"))"
  [ $rc -eq 0 ] || status=1
fi
# generate's greedy ids on the GPU with the flag after the first three arguments against its
# default (n tokens; outputs in $out/generate_cuda_{base,with}.json): the same ids, or the run fails.
same_ids_with() {
  local n=$1 base=$2 with=$3
  shift 3
  local run=(generate --model "$model" --prompt-ids "$prompt" -n "$n" --ignore-eos --device cuda --json)
  echo "== generate $*"
  "$here/dsv4" "${run[@]}" >"$out/generate_cuda_$base.json" 2>"$out/generate_cuda_$base.err" || status=1
  "$here/dsv4" "${run[@]}" "$@" >"$out/generate_cuda_$with.json" 2>"$out/generate_cuda_$with.err" || status=1
  if cmp -s "$out/generate_cuda_$base.json" "$out/generate_cuda_$with.json"; then
    echo "   same ids with $*"
  else
    echo "   $* gave other ids (or failed): see generate_cuda_{$base,$with}.json"
    status=1
  fi
}
prompt=$(seq -s, 1000 37 5000)
# Decode steps through CUDA graphs (the default) against every op launched eagerly.
same_ids_with 140 graphs eager --cuda-graphs off
# The attention chains on side streams against one stream.
same_ids_with 16 one_stream multi_stream --multi-stream on
# generate on the GPU: greedy ids against the CPU's, timings, and memcheck over a short run.
echo "== generate"
"$here/dsv4" generate --model "$model" --prompt-ids "$prompt" -n 32 --ignore-eos --device cuda --stats 2>&1 | tee "$out/generate_cuda.txt" || status=1
"$here/dsv4" generate --model "$model" --prompt-ids "$prompt" -n 32 --ignore-eos --device cpu 2>&1 | tee "$out/generate_cpu.txt" || status=1
if [ "$sanitize" = 1 ]; then
  timeout "${GPU_SANITIZE_LIMIT:-150}" compute-sanitizer --tool memcheck --error-exitcode 1 "$here/dsv4" generate --model "$model" --prompt-ids "$prompt" \
    -n 4 --device cuda >"$out/generate.memcheck.log" 2>&1
  rc=$?
  echo "   compute-sanitizer memcheck (generate): rc=$rc ($(tail -n 1 "$out/generate.memcheck.log"))"
  [ $rc -eq 0 ] || status=1
fi
# Sampling on the GPU (edits, draws, logprobs) against the host sampler on vocabulary-sized rows:
# the same tokens, or the run fails; the JSON holds the timings.
echo "== bench sampling --device cuda"
"$here/dsv4" bench sampling --device cuda --batch 64 --draws 64 --json "$out/bench_sampling_cuda.json" 2>&1 |
  tee "$out/bench_sampling_cuda.txt" || status=1
grep -q "rows where the backend's token is not the host's: 0)" "$out/bench_sampling_cuda.txt" || {
  echo "   the GPU's sampled tokens are not the host's"
  status=1
}
[ "$bench" = 1 ] || exit $status
for b in "$here"/bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  echo "== $name"
  "$b" 2>&1 | tee "$out/$name.txt" || status=1
done
# One layer of each kind at V4-Flash geometry (dummy weights): prefill of 8k tokens and decode at
# batch 1, 16 and 64 beside their floors, with the side streams off and on, then a profiled run.
for ms in off on; do
  echo "== bench layers (multi-stream $ms)"
  "$here/dsv4" bench layers --device cuda --model flash --context 8192 --batch 1,16,64 --iters 20 \
    --multi-stream "$ms" --json "$out/bench_layers_$ms.json" 2>"$out/bench_layers_$ms.err" | tee "$out/bench_layers_$ms.txt" || status=1
done
"$here/dsv4" bench layers --device cuda --model flash --context 8192 --batch 1,64 --iters 5 --profile \
  >"$out/bench_layers_profile.txt" 2>&1 || status=1
exit $status
