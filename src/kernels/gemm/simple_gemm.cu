// The plain tiled GEMM (see simple_gemm.h): 64x64 output tiles, 16-deep K slices in shared
// memory, 4x4 outputs per thread, weights converted to fp32 as they are loaded.
#include "kernels/gemm/simple_gemm.h"

#include "backend/cuda/cuda_check.h"

namespace dsv4::kernels {
namespace {

constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kThreads = 256;

template <GemmWeight W>
__device__ __forceinline__ float weight_at(const SimpleGemmParams& p, int64_t row, int64_t col) {
  const int64_t i = row * p.k + col;
  if constexpr (W == GemmWeight::kF32) {
    return static_cast<const float*>(p.w)[i];
  } else if constexpr (W == GemmWeight::kBF16) {
    return bf16_to_float(static_cast<const uint16_t*>(p.w)[i]);
  } else {
    const float s = p.w_scale[(row / 128) * p.w_scale_ld + col / 128];
    return __fmul_rn(e4m3_to_float(static_cast<const uint8_t*>(p.w)[i]), s);  // exact: s is a power of two
  }
}

template <bool XBf16, GemmWeight W>
__global__ void __launch_bounds__(kThreads) simple_gemm_kernel(SimpleGemmParams p) {
  __shared__ float xs[kTileK][kTileM + 1];
  __shared__ float ws[kTileK][kTileN + 1];
  const int64_t g = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int64_t w_row0 = g * p.n;
  const int64_t x_off = g * p.x_group_stride;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    for (int e = tid; e < kTileM * kTileK; e += kThreads) {
      const int r = e / kTileK, c = e % kTileK;
      const int64_t row = m0 + r, col = k0 + c;
      float v = 0;
      if (row < p.m && col < p.k) {
        const int64_t i = x_off + row * p.ldx + col;
        v = XBf16 ? bf16_to_float(static_cast<const uint16_t*>(p.x.data)[i]) : static_cast<const float*>(p.x.data)[i];
      }
      xs[c][r] = v;
    }
    for (int e = tid; e < kTileN * kTileK; e += kThreads) {
      const int r = e / kTileK, c = e % kTileK;
      const int64_t row = n0 + r, col = k0 + c;
      ws[c][r] = (row < p.n && col < p.k) ? weight_at<W>(p, w_row0 + row, col) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTileK; ++c) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[c][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[c][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  const int64_t y_off = g * p.y_group_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (row < p.m && col < p.n) store_float(p.y, y_off + row * p.ldy + col, acc[i][j]);
    }
}

template <bool XBf16>
void launch_for_x(const SimpleGemmParams& p, dim3 grid, cudaStream_t stream) {
  switch (p.w_type) {
    case GemmWeight::kF32: simple_gemm_kernel<XBf16, GemmWeight::kF32><<<grid, kThreads, 0, stream>>>(p); break;
    case GemmWeight::kBF16: simple_gemm_kernel<XBf16, GemmWeight::kBF16><<<grid, kThreads, 0, stream>>>(p); break;
    case GemmWeight::kE4M3: simple_gemm_kernel<XBf16, GemmWeight::kE4M3><<<grid, kThreads, 0, stream>>>(p); break;
  }
}

}  // namespace

void simple_gemm(const SimpleGemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0 || p.groups == 0) return;
  const dim3 grid(static_cast<unsigned>((p.n + kTileN - 1) / kTileN), static_cast<unsigned>((p.m + kTileM - 1) / kTileM),
                  static_cast<unsigned>(p.groups));
  if (p.x.bf16) launch_for_x<true>(p, grid, stream);
  else launch_for_x<false>(p, grid, stream);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
