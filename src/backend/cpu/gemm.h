// The CPU backend's matrix product, through BLAS (OpenBLAS sgemm), arranged so that every output
// row depends only on its input row: batching, chunking and the thread count never change a bit.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace dsv4::cpu {

// OpenBLAS picks its micro-kernels by the block's shape, and with them the summation order: the
// same row gives different bits in an M = 1, 16 or 300 call (measured with OpenBLAS 0.3.21 on
// Zen; tests/unit/test_cpu_gemm.cpp checks the property this blocking restores). Calls of exactly
// kRowBlock rows, the last block zero-padded, and a fixed split of the N columns give each row
// the same kernel whatever else is in the batch.
constexpr int64_t kGemmRowBlock = 8;
constexpr int64_t kGemmColChunk = 256;

// y[m, n] = sum_k x[m, k] * w[n, k] for m < M, n < N (x with row stride ldx, y with ldy; w dense
// [N, K]). Work is spread over the pool in (row block, column chunk) tiles.
void gemm_xwt(ThreadPool& pool, const float* x, int64_t ldx, int64_t M, int64_t K, const float* w,
              int64_t N, float* y, int64_t ldy);

// Must be called once before gemm_xwt runs from several threads: BLAS-internal threading is
// switched off, the pool does the splitting.
void configure_blas_threads();

// The micro-kernel family OpenBLAS chose for this CPU (e.g. "SkylakeX", "Haswell"; the
// OPENBLAS_CORETYPE environment variable overrides the choice). Each family sums in its own order,
// so the reference's last bits, and through the FP8 quantisations its logits, depend on it
// (docs/PERF.md session 45): a comparison against the reference names the family it ran with.
const char* blas_core_name();

}  // namespace dsv4::cpu
