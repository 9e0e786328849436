// The FP8 block-scaled GEMM on fp16 tensor cores (see fp8_mma_gemm.h for the summation order).
// A block of 4 warps owns 16 weight rows and up to 32 x rows; warp j takes the K blocks b with
// b mod 4 == j and the block adds the four partial sums in order at the end. mma.sync m16n8k16
// takes the weight rows as A and the x rows as B. Each lane loads 32 contiguous bytes of a row per
// K block straight from global memory: any permutation of K applied to both operands leaves the
// products' sum unchanged, so lane (g, t) feeds bytes 32t + 4s .. 32t + 4s + 3 of its rows to MMA
// step s as the K positions 2t, 2t+1, 2t+8, 2t+9 the fragment layout gives it.
#include "kernels/gemm/fp8_mma_gemm.h"

#include <cuda_fp8.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 4;        // K lanes of a block
constexpr int kRowsPerBlock = 16;  // weight rows of a block (one MMA's M)

// Two e4m3 codes (low byte first) as an fp16x2 register, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ __forceinline__ void mma_f16_f32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 32 bytes of one row's K block (its lane's share), or zeros for a row past the end.
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

template <int NT>  // 8-row x tiles per block
__global__ void __launch_bounds__(kWarps * 32) fp8_mma_gemm_kernel(Fp8MmaGemmParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  int64_t x_row0 = 0, x_rows = 0;
  const uint8_t* w = p.w;
  const float* w_scale = p.w_scale;
  if (p.tiles != nullptr) {
    if (static_cast<int64_t>(blockIdx.y) >= *p.tile_count) return;
    const Fp8MmaTile tile = p.tiles[blockIdx.y];
    x_row0 = tile.row_begin;
    x_rows = tile.rows;
    w = p.group_w[tile.group];
    w_scale = p.group_w_scale[tile.group];
  } else {
    x_row0 = static_cast<int64_t>(blockIdx.y) * 8 * NT;
    x_rows = min(static_cast<int64_t>(8 * NT), p.m - x_row0);
  }
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t kblocks = p.k / 128;
  const bool row_a = n0 + g < p.n, row_b = n0 + g + 8 < p.n;
  const uint8_t* wa = w + (n0 + g) * p.k + 32 * t;
  const uint8_t* wb = wa + 8 * p.k;
  const float* sw_row = w_scale + (n0 / 128) * p.w_scale_ld;

  float q[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) q[j][0] = q[j][1] = q[j][2] = q[j][3] = 0.0f;

  for (int64_t b = warp; b < kblocks; b += kWarps) {
    const RowBytes a_lo = load_row_bytes(wa + b * 128, row_a), a_hi = load_row_bytes(wb + b * 128, row_b);
    RowBytes xb[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int r = 8 * j + g;
      xb[j] = load_row_bytes(p.x + (x_row0 + r) * p.k + b * 128 + 32 * t, r < x_rows);
    }
    float blk[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) blk[j][0] = blk[j][1] = blk[j][2] = blk[j][3] = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint32_t wa_s = a_lo.word(s), wb_s = a_hi.word(s);
      const uint32_t a0 = e4m3x2_to_f16x2(wa_s & 0xffff), a2 = e4m3x2_to_f16x2(wa_s >> 16);
      const uint32_t a1 = e4m3x2_to_f16x2(wb_s & 0xffff), a3 = e4m3x2_to_f16x2(wb_s >> 16);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint32_t x_s = xb[j].word(s);
        mma_f16_f32(blk[j], a0, a1, a2, a3, e4m3x2_to_f16x2(x_s & 0xffff), e4m3x2_to_f16x2(x_s >> 16));
      }
    }
    const float sw = __ldg(sw_row + b);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      // The accumulator's columns are x rows 8j + 2t and 8j + 2t + 1.
      const int r0 = 8 * j + 2 * t, r1 = r0 + 1;
      const float s0 = r0 < x_rows ? sw * __ldg(p.x_scale + b * p.x_scale_ld + x_row0 + r0) : 0.0f;
      const float s1 = r1 < x_rows ? sw * __ldg(p.x_scale + b * p.x_scale_ld + x_row0 + r1) : 0.0f;
      q[j][0] = fmaf(blk[j][0], s0, q[j][0]);
      q[j][1] = fmaf(blk[j][1], s1, q[j][1]);
      q[j][2] = fmaf(blk[j][2], s0, q[j][2]);
      q[j][3] = fmaf(blk[j][3], s1, q[j][3]);
    }
  }

  __shared__ float partial[kWarps - 1][NT][4][32];
  if (warp > 0) {
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
      for (int i = 0; i < kWarps - 1; ++i) sum = __fadd_rn(sum, partial[i][j][c][lane]);
      const int r = 8 * j + 2 * t + (c & 1);
      const int64_t n = n0 + g + (c >= 2 ? 8 : 0);
      if (r < x_rows && n < p.n) store_float(p.y, (x_row0 + r) * p.ldy + n, sum);
    }
}

}  // namespace

int32_t fp8_mma_tile_rows(int64_t m) { return m <= 8 ? 8 : m <= 16 ? 16 : 32; }

void fp8_mma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream) {
  if (p.k % 128 != 0) throw UsageError("fp8_mma_gemm: k=" + std::to_string(p.k) + " is not a multiple of 128");
  const bool grouped = p.tiles != nullptr;
  const int32_t tile_rows = grouped ? p.tile_rows : fp8_mma_tile_rows(p.m);
  const int64_t tiles = grouped ? p.max_tiles : (p.m + tile_rows - 1) / tile_rows;
  if (p.n == 0 || tiles == 0 || p.k == 0) return;
  if (tiles > 65535)
    throw UsageError("fp8_mma_gemm: " + std::to_string(tiles) + " row tiles, at most 65535 (split the call)");
  const dim3 grid(static_cast<unsigned>((p.n + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(tiles));
  switch (tile_rows) {
    case 8: fp8_mma_gemm_kernel<1><<<grid, kWarps * 32, 0, stream>>>(p); break;
    case 16: fp8_mma_gemm_kernel<2><<<grid, kWarps * 32, 0, stream>>>(p); break;
    case 32: fp8_mma_gemm_kernel<4><<<grid, kWarps * 32, 0, stream>>>(p); break;
    default: throw UsageError("fp8_mma_gemm: tile_rows=" + std::to_string(tile_rows) + ", expected 8, 16 or 32");
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
