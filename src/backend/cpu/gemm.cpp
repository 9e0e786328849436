// Row-blocked sgemm: fixed 8-row tiles (the last one zero-padded) and fixed column chunks.
#include "backend/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace dsv4::cpu {

void configure_blas_threads() { openblas_set_num_threads(1); }

const char* blas_core_name() { return openblas_get_corename(); }

void gemm_xwt(ThreadPool& pool, const float* x, int64_t ldx, int64_t M, int64_t K, const float* w,
              int64_t N, float* y, int64_t ldy) {
  if (M <= 0 || N <= 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(y + m * ldy, y + m * ldy + N, 0.0f);
    return;
  }
  const int64_t row_blocks = (M + kGemmRowBlock - 1) / kGemmRowBlock;
  const int64_t col_chunks = (N + kGemmColChunk - 1) / kGemmColChunk;
  // Tiles go column chunk by column chunk, so consecutive tiles reuse the same slice of w.
  pool.parallel_for(row_blocks * col_chunks, [&](int64_t tile) {
    const int64_t cc = tile / row_blocks, rb = tile % row_blocks;
    const int64_t m0 = rb * kGemmRowBlock, rows = std::min(kGemmRowBlock, M - m0);
    const int64_t n0 = cc * kGemmColChunk, cols = std::min(kGemmColChunk, N - n0);
    const float* a = x + m0 * ldx;
    int64_t lda = ldx;
    float* c = y + m0 * ldy + n0;
    int64_t ldc = ldy;
    std::vector<float> a_pad, c_pad;
    if (rows < kGemmRowBlock) {
      a_pad.assign(static_cast<size_t>(kGemmRowBlock * K), 0.0f);
      for (int64_t r = 0; r < rows; ++r) std::memcpy(&a_pad[static_cast<size_t>(r * K)], a + r * ldx, K * sizeof(float));
      a = a_pad.data();
      lda = K;
      c_pad.assign(static_cast<size_t>(kGemmRowBlock * cols), 0.0f);
      c = c_pad.data();
      ldc = cols;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(kGemmRowBlock), static_cast<int>(cols),
                static_cast<int>(K), 1.0f, a, static_cast<int>(lda), w + n0 * K, static_cast<int>(K), 0.0f, c,
                static_cast<int>(ldc));
    if (rows < kGemmRowBlock)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(y + (m0 + r) * ldy + n0, &c_pad[static_cast<size_t>(r * cols)], cols * sizeof(float));
  });
}

}  // namespace dsv4::cpu
