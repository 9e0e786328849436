// One warp per output column (weight row): each lane loads 16 bytes of the row at a time, which
// are 32 e2m1 values under one e8m0 scale, multiplies them with the activations' e4m3 values
// (decoded through a shared table, the rows' codes staged in shared memory), adds the 32 products
// in fp32, scales the sum by the weight's and the activation block's pow2 scales (exact) and
// accumulates; the lanes' sums meet in a fixed shuffle tree.
#include "kernels/gemm/fp4_gemv.h"

#include <string>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kValuesPerLoad = 32;  // 16 bytes of e2m1 pairs, one scale group

__global__ void __launch_bounds__(kWarps * 32) fp4_gemv_kernel(Fp4GemvParams p) {
  pdl_wait();
  extern __shared__ uint8_t x_codes[];  // [m][k], the first m rows of x (contiguous)
  __shared__ float e4m3_table[256];
  __shared__ float e2m1_table[16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c = threadIdx.x; c < 256; c += blockDim.x) e4m3_table[c] = e4m3_to_float(static_cast<uint8_t>(c));
  if (threadIdx.x < 16) e2m1_table[threadIdx.x] = e2m1_to_float(static_cast<uint8_t>(threadIdx.x));
  const int64_t x_bytes = p.m * p.k;
  for (int64_t i = threadIdx.x * 16; i < x_bytes; i += blockDim.x * 16)
    *reinterpret_cast<uint4*>(x_codes + i) = *reinterpret_cast<const uint4*>(p.x + i);
  __syncthreads();

  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (col >= p.n) return;

  const uint8_t* w_row = p.w + col * (p.k / 2);
  const uint8_t* s_row = p.w_scale + col * (p.k / 32);
  float acc[kFp4GemvMaxRows] = {};
  for (int64_t k0 = static_cast<int64_t>(lane) * kValuesPerLoad; k0 < p.k; k0 += 32 * kValuesPerLoad) {
    const uint4 packed = *reinterpret_cast<const uint4*>(w_row + k0 / 2);
    const float w_scale = e8m0_to_float(s_row[k0 / 32]);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    float wv[kValuesPerLoad];
#pragma unroll
    for (int j = 0; j < kValuesPerLoad; ++j) wv[j] = e2m1_table[(words[j / 8] >> (4 * (j % 8))) & 0xf];
#pragma unroll
    for (int r = 0; r < kFp4GemvMaxRows; ++r) {
      if (r >= p.m) break;
      const uint8_t* xr = x_codes + r * p.k + k0;
      float part = 0.0f;
#pragma unroll
      for (int j = 0; j < kValuesPerLoad; ++j) part = fmaf(e4m3_table[xr[j]], wv[j], part);
      const float x_scale = p.x_scale[(k0 / 128) * p.m_padded + r];
      acc[r] = fmaf(part, w_scale * x_scale, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kFp4GemvMaxRows; ++r) {
    if (r >= p.m) break;
    float v = acc[r];
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) p.out[r * p.n + col] = float_to_bf16(v);
  }
}

}  // namespace

void fp4_gemv(const Fp4GemvParams& p, cudaStream_t stream) {
  if (p.m < 1 || p.m > kFp4GemvMaxRows || p.m_padded < p.m || p.n < 1 || p.k < 1024 || p.k % 1024 != 0)
    throw UsageError("fp4_gemv: m=" + std::to_string(p.m) + " (1.." + std::to_string(kFp4GemvMaxRows) +
                     "), m_padded=" + std::to_string(p.m_padded) + ", n=" + std::to_string(p.n) +
                     ", k=" + std::to_string(p.k) + " (a positive multiple of 1024)");
  const size_t smem = static_cast<size_t>(p.m * p.k);
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(fp4_gemv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const unsigned grid = static_cast<unsigned>((p.n + kWarps - 1) / kWarps);
  launch_pdl(fp4_gemv_kernel, grid, kWarps * 32, smem, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
