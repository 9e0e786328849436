// chained_mma_sync_reference (chained_mma_reference.h): one warp a 16 x 8 tile of y, its four K
// lanes in turn.
#include "tests/ops/chained_mma_reference.h"

#include "kernels/cuda_check.h"
#include "kernels/gemm/mma_lanes.cuh"

namespace dsv4::testing {
namespace {

// Lane (g, t) holds A (the weight) rows g, g + 8 and B (x) row g at K columns 2t, 2t + 1 and
// 2t + 8, 2t + 9 of each k16 step, and y's columns n0 + g, n0 + g + 8 of rows m0 + 2t, m0 + 2t + 1.
__global__ void chained_mma_sync_kernel(const uint16_t* x16, const uint16_t* w16, float* y, int64_t m, int64_t n,
                                        int64_t k) {
  const int g = static_cast<int>(threadIdx.x) / 4, t = static_cast<int>(threadIdx.x) % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16, m0 = static_cast<int64_t>(blockIdx.y) * 8;
  const auto pair = [&](const uint16_t* rows, int64_t row, int64_t count, int64_t column) {
    return row < count ? *reinterpret_cast<const uint32_t*>(rows + row * k + column) : 0u;
  };
  const int64_t kblocks = k / 128;
  float sum[4] = {0, 0, 0, 0};
  for (int lane = 0; lane < 4; ++lane) {
    float acc[4] = {0, 0, 0, 0};
    for (int64_t b = lane; b < kblocks; b += 4)
      for (int s = 0; s < 8; ++s) {
        const int64_t c = b * 128 + 16 * s + 2 * t;
        kernels::mma_bf16_f32(acc, pair(w16, n0 + g, n, c), pair(w16, n0 + g + 8, n, c), pair(w16, n0 + g, n, c + 8),
                              pair(w16, n0 + g + 8, n, c + 8), pair(x16, m0 + g, m, c), pair(x16, m0 + g, m, c + 8));
      }
    for (int i = 0; i < 4; ++i) sum[i] = lane == 0 ? acc[i] : __fadd_rn(sum[i], acc[i]);
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t row = m0 + 2 * t + i % 2, column = n0 + g + 8 * (i / 2);
    if (row < m && column < n) y[row * n + column] = sum[i];
  }
}

}  // namespace

void chained_mma_sync_reference(const uint16_t* x16, const uint16_t* w16, float* y, int64_t m, int64_t n, int64_t k) {
  const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((m + 7) / 8));
  chained_mma_sync_kernel<<<grid, 32>>>(x16, w16, y, m, n, k);
  DSV4_CUDA_CHECK(cudaGetLastError());
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace dsv4::testing
