#!/usr/bin/env bash
# Collects what a GPU run needs (the GPU test binaries, stripped) into .dev/gpu/, the folder the
# device tool carries to the H200 machine. Usage: scripts/gpu_bundle.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=.dev/gpu
rm -rf "$out" && mkdir -p "$out"
for bin in "$build"/tests/ops/test_ops_cuda "$build"/bench/bench_fp8_gemm "$build"/tools/dsv4; do
  [ -x "$bin" ] || continue
  cp "$bin" "$out/" && strip "$out/$(basename "$bin")"
done
cp scripts/gpu_run.sh "$out/"
du -sh "$out"
