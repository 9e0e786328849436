// Pieces shared by the GEMMs that stream a weight into registers (kernels::fp8_mma_gemm's
// streamed kernels, kernels::grouped_bf16_fp8_gemm, kernels::bf16_mma_gemm): a lane's 32 bytes
// (or 32 bf16 values) of a row's K block, e4m3 pairs as fp16x2 (or bf16x2, scaled or not), the
// bf16 MMA, and the end of a block whose warps each summed every kLanes-th K block of the same
// outputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/bf16_cast.cuh"

namespace dsv4::kernels {

// 32 bytes of one row's K block (a lane's share), or zeros for a row past the end.
struct RowBytes {
  uint4 lo, hi;
  __device__ __forceinline__ uint32_t word(int s) const {
    switch (s) {
      case 0: return lo.x;
      case 1: return lo.y;
      case 2: return lo.z;
      case 3: return lo.w;
      case 4: return hi.x;
      case 5: return hi.y;
      case 6: return hi.z;
      default: return hi.w;
    }
  }
};

__device__ __forceinline__ RowBytes load_row_bytes(const uint8_t* p, bool valid) {
  if (!valid) return {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  const auto* v = reinterpret_cast<const uint4*>(p);
  return {__ldg(v), __ldg(v + 1)};
}

// Two e4m3 codes (low byte first) as an fp16x2 register, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Two e4m3 codes (low byte first) as a bf16x2 register, exactly (e4m3 -> fp16 -> fp32 -> bf16
// are all exact for e4m3's values).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two_codes) {
  const uint32_t h = e4m3x2_to_f16x2(two_codes);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// Two e4m3 codes' fp16 values (e4m3x2_to_f16x2's register) times `scale` (a power of two) as a
// bf16x2 register: exact, barring underflow past bf16's subnormals (e4m3's 4 significant bits fit
// bf16's 8); NaN codes stay NaN (float2_to_bf16x2). The chained order's operands (act_quant_fp8's
// q16_bf16_scaled, e4m3_to_bf16_scaled_mma_order).
__device__ __forceinline__ uint32_t f16x2_codes_to_scaled_bf16x2(uint32_t h, float scale) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return float2_to_bf16x2(f.x * scale, f.y * scale);
}

__device__ __forceinline__ void mma_bf16_f32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 32 consecutive bf16 values of an x row as 16 words (word 2s, 2s+1: values 4s .. 4s+3), or zeros.
struct Bf16x32 {
  uint4 v[4];
  __device__ __forceinline__ uint32_t word(int i) const {
    const uint4& q = v[i / 4];
    switch (i % 4) {
      case 0: return q.x;
      case 1: return q.y;
      case 2: return q.z;
      default: return q.w;
    }
  }
};

__device__ __forceinline__ Bf16x32 load_bf16x32(const uint16_t* p, bool valid) {
  Bf16x32 out;
#pragma unroll
  for (int i = 0; i < 4; ++i) out.v[i] = valid ? __ldg(reinterpret_cast<const uint4*>(p) + i) : make_uint4(0, 0, 0, 0);
  return out;
}

// The block's end: warp w < kLanes holds q, its fp32 sums over the K blocks b with
// b mod kLanes == w, for NT 16x8 accumulator tiles (warps past kLanes hold nothing); each output
// gets ((q_0 + q_1) + q_2) + ... and goes to store(x row of the tile, weight row of the block
// (0..15), value) on warp 0. Every thread of the block calls it (it holds a __syncthreads).
template <int kLanes, int NT, typename Store>
__device__ __forceinline__ void sum_lanes_and_store(const float (&q)[NT][4], Store store) {
  __shared__ float partial[kLanes - 1][NT][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  if (warp > 0 && warp < kLanes) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp - 1][j][c][lane] = q[j][c];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float sum = q[j][c];
#pragma unroll
      for (int i = 0; i < kLanes - 1; ++i) sum = __fadd_rn(sum, partial[i][j][c][lane]);
      // The accumulator's columns are x rows 8j + 2t and 8j + 2t + 1, its rows weight rows g, g + 8.
      store(8 * j + 2 * t + (c & 1), g + (c >= 2 ? 8 : 0), sum);
    }
}

}  // namespace dsv4::kernels
