// The grouped bf16 x FP8 GEMM (see grouped_bf16_fp8_gemm.h for the summation order). A block of
// 4 warps owns 16 weight rows of one group (blockIdx.z) and up to 8 * NT x rows; warp j takes the
// K blocks b with b mod 4 == j and the block adds the four partial sums in order at the end.
// mma.sync m16n8k16 (bf16) takes the weight rows as A and the x rows as B. Each lane reads the
// same 32 K positions of its rows per K block (codes 32t .. 32t + 31 of a weight row, the same
// 32 bf16 values of an x row) straight from global memory; any permutation of K applied to both
// operands leaves the products' sum unchanged, so for MMA step s lane (g, t) feeds positions
// 32t + 4s .. 32t + 4s + 3 as the fragment's K slots 2t, 2t+1 (first pair) and 2t+8, 2t+9
// (second pair): A regs a0/a1 (rows g, g+8) and a2/a3 hold code pairs (4s, 4s+1) and (4s+2,
// 4s+3), B regs b0 and b1 the x pairs at the same positions. The weight streams into registers
// (no shared memory), so decode-sized batches are bound by the weight's bytes.
#include "kernels/gemm/grouped_bf16_fp8_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 4;          // K lanes of a block
constexpr int kRowsPerBlock = 16;  // weight rows of a block (one MMA's M)
constexpr int64_t kKBlock = 128;

// Two e4m3 codes (low byte first) as a bf16x2 register, exactly (e4m3 -> fp16 -> fp32 -> bf16
// are all exact for e4m3's values).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two_codes) {
  const uint32_t h = e4m3x2_to_f16x2(two_codes);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&b);
}

template <int NT>  // 8-row x tiles per block
__global__ void __launch_bounds__(kWarps * 32) grouped_bf16_fp8_gemm_kernel(GroupedBf16Fp8GemmParams p) {
  pdl_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t group = blockIdx.z;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;  // row within the group
  const int64_t x_row0 = static_cast<int64_t>(blockIdx.y) * 8 * NT;    // token
  const int64_t x_rows = min(static_cast<int64_t>(8 * NT), p.tokens - x_row0);
  const int64_t kblocks = p.k / kKBlock;
  const bool row_a = n0 + g < p.r, row_b = n0 + g + 8 < p.r;
  const int64_t w_row = group * p.r + n0 + g;  // of the [groups * r, k] weight
  const uint8_t* wa = p.w + w_row * p.k + 32 * t;
  const uint8_t* wb = wa + 8 * p.k;
  // The block's 16 rows lie in one 128-row scale block (r and n0 are multiples of 16).
  const float* sw_row = p.w_scale + ((group * p.r + n0) / kKBlock) * p.w_scale_ld;

  float q[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) q[j][0] = q[j][1] = q[j][2] = q[j][3] = 0.0f;

  for (int64_t b = warp; b < kblocks; b += kWarps) {
    const RowBytes a_lo = load_row_bytes(wa + b * kKBlock, row_a), a_hi = load_row_bytes(wb + b * kKBlock, row_b);
    Bf16x32 xb[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int r = 8 * j + g;
      xb[j] = load_bf16x32(p.x + ((x_row0 + r) * p.groups + group) * p.k + b * kKBlock + 32 * t, r < x_rows);
    }
    float blk[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) blk[j][0] = blk[j][1] = blk[j][2] = blk[j][3] = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint32_t wa_s = a_lo.word(s), wb_s = a_hi.word(s);
      const uint32_t a0 = e4m3x2_to_bf16x2(wa_s & 0xffff), a2 = e4m3x2_to_bf16x2(wa_s >> 16);
      const uint32_t a1 = e4m3x2_to_bf16x2(wb_s & 0xffff), a3 = e4m3x2_to_bf16x2(wb_s >> 16);
#pragma unroll
      for (int j = 0; j < NT; ++j) mma_bf16_f32(blk[j], a0, a1, a2, a3, xb[j].word(2 * s), xb[j].word(2 * s + 1));
    }
    const float sw = __ldg(sw_row + b);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) q[j][c] = fmaf(blk[j][c], sw, q[j][c]);
  }

  sum_lanes_and_store<kWarps, NT>(q, [&](int r, int row, float sum) {
    const int64_t n = n0 + row;
    if (r < x_rows && n < p.r) store_float(p.y, ((x_row0 + r) * p.groups + group) * p.r + n, sum);
  });
}

}  // namespace

bool grouped_bf16_fp8_gemm_supports(int64_t r, int64_t k) {
  return r > 0 && r % kRowsPerBlock == 0 && k > 0 && k % kKBlock == 0;
}

void grouped_bf16_fp8_gemm(const GroupedBf16Fp8GemmParams& p, cudaStream_t stream) {
  if (!grouped_bf16_fp8_gemm_supports(p.r, p.k))
    throw UsageError("grouped_bf16_fp8_gemm: r=" + std::to_string(p.r) + ", k=" + std::to_string(p.k) +
                     ": r must be a multiple of 16 and k of 128");
  if (p.tokens == 0 || p.groups == 0) return;
  const int nt = p.tokens <= 8 ? 1 : p.tokens <= 16 ? 2 : 4;
  const int64_t tiles = (p.tokens + 8 * nt - 1) / (8 * nt);
  if (tiles > 65535 || p.groups > 65535)
    throw UsageError("grouped_bf16_fp8_gemm: " + std::to_string(p.tokens) + " tokens in " + std::to_string(p.groups) +
                     " groups exceed one launch (split the call)");
  const dim3 grid(static_cast<unsigned>(p.r / kRowsPerBlock), static_cast<unsigned>(tiles),
                  static_cast<unsigned>(p.groups));
  switch (nt) {
    case 1: launch_pdl(grouped_bf16_fp8_gemm_kernel<1>, grid, kWarps * 32, 0, stream, p); break;
    case 2: launch_pdl(grouped_bf16_fp8_gemm_kernel<2>, grid, kWarps * 32, 0, stream, p); break;
    default: launch_pdl(grouped_bf16_fp8_gemm_kernel<4>, grid, kWarps * 32, 0, stream, p); break;
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
