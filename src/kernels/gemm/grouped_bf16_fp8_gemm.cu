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
// (no shared memory), so decode-sized batches are bound by the weight's bytes. From
// kStagedMinTokens tokens on, staged kernels of the same arithmetic take over (below).
#include "kernels/gemm/grouped_bf16_fp8_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/gemm/staged_tiles.cuh"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 4;          // K lanes of a block
constexpr int kRowsPerBlock = 16;  // weight rows of a block (one MMA's M)
constexpr int64_t kKBlock = 128;

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

  // The weight rows of the warp's next K block are loaded before this block's MMAs: a decode step's
  // call (512 blocks of 4 warps) had one block's bytes in flight a warp, ~68% of HBM's rate for
  // wo_a at batch 1 (docs/PERF.md session 48).
  RowBytes a_lo = load_row_bytes(wa + warp * kKBlock, row_a && warp < kblocks);
  RowBytes a_hi = load_row_bytes(wb + warp * kKBlock, row_b && warp < kblocks);
  for (int64_t b = warp; b < kblocks; b += kWarps) {
    const bool more = b + kWarps < kblocks;
    const RowBytes next_lo = load_row_bytes(wa + (b + kWarps) * kKBlock, row_a && more);
    const RowBytes next_hi = load_row_bytes(wb + (b + kWarps) * kKBlock, row_b && more);
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
    a_lo = next_lo;
    a_hi = next_hi;
  }

  sum_lanes_and_store<kWarps, NT>(q, [&](int r, int row, float sum) {
    const int64_t n = n0 + row;
    if (r < x_rows && n < p.r) store_float(p.y, ((x_row0 + r) * p.groups + group) * p.r + n, sum);
  });
}

// ---- The staged kernels ----
//
// A CTA of 8 warps owns kRows weight rows [n0, n0 + kRows) of one group (blockIdx.z) and kTokens
// tokens; each K block's weight tile (kRows rows x 128 codes) and x tile (kTokens tokens x 128
// bf16) come into shared memory with cp.async, kStages - 1 blocks ahead, so a byte crosses L2 once
// per CTA instead of once per warp. Warp (wm, wn) = (warp % 4, warp / 4) computes weight rows
// 16 MI wm .. + 16 MI - 1 (MI m16 tiles i) against tokens 8 NJ wn .. + 8 NJ - 1 (NJ n8 tiles j),
// issuing for every output the streamed kernel's eight MMAs per block with the same operands in the
// same fragment slots, and the CTA walks the blocks in staged_block_at's order with the running sum
// of the four lanes in shared memory: the streamed kernel's bits, whatever the tile's shape.
//
// Shared layouts (a 128-bit load is served a quarter warp at a time; both are free of bank
// conflicts for the loads below): weight row r's 16-byte chunk c at chunk c ^ (r % 8) of its 128
// bytes (lanes 8h .. 8h + 7 ask for rows 2h, 2h + 1 and chunks 2t + half: eight distinct chunks);
// token row r's 16-byte chunk c (of 16) at chunk c ^ (c / 8 * 2) ^ (r % 2) of its 256 bytes (lanes
// ask for rows 2h, 2h + 1 and chunks 4t + u, whose positions mod 8 are then all different).
constexpr int kStagedWarps = 8;
constexpr int kStagedThreads = kStagedWarps * 32;

// The shapes: 128 x 128 tiles (3 stages, one CTA an SM) where there are enough of them to fill the
// GPU (prefill); 64 weight rows and 32 or 64 tokens for decode batches, so that wo_a's call still
// has 8 groups x 16 row tiles = 128 CTAs and at most half a tile's MMAs is spent on padding (the
// 128 x 128 tiles at batch 64: 64 CTAs, half of them padding, 68 us a call against 7.6 us for the
// weight's bytes). A decode CTA, alone on its SM, keeps 7 blocks in flight (8 stages): 28 us a
// call at batch 64, 44 us with 4 stages (docs/PERF.md, session 16).
template <int MI, int NJ>
struct StagedShape {
  static constexpr int kRows = 4 * 16 * MI;    // weight rows of a CTA (within one 128-row scale block)
  static constexpr int kTokens = 2 * 8 * NJ;   // tokens of a CTA
  static constexpr int kStages = MI == 2 ? 3 : 8;
  static constexpr int kWTileBytes = kRows * 128;     // e4m3 codes
  static constexpr int kXTileBytes = kTokens * 128 * 2;  // bf16
  static constexpr int kStageBytes = kWTileBytes + kXTileBytes;
  static constexpr int kOutputsPerLane = MI * NJ * 4;  // m16 tiles x n8 tiles x accumulator registers
  static constexpr int kSumBytes = kStagedWarps * kOutputsPerLane * 32 * static_cast<int>(sizeof(float));
  static constexpr int kSharedBytes = kStages * kStageBytes + kSumBytes;
  static constexpr int kMinBlocks = (227 * 1024) / (kSharedBytes + 1024);  // CTAs an SM by shared memory
  static_assert(kRows <= 128 && kSharedBytes <= 227 * 1024, "a staged tile exceeds a scale block or Hopper's 227 KiB");
};
using PrefillShape = StagedShape<2, 8>;  // 212992 bytes

__device__ __forceinline__ uint32_t w_chunk_at(int r, int c) { return static_cast<uint32_t>(r * 128 + ((c ^ (r % 8)) << 4)); }
__device__ __forceinline__ uint32_t x_chunk_at(int r, int c) {
  return static_cast<uint32_t>(r * 256 + ((c ^ ((c >> 3) << 1) ^ (r & 1)) << 4));
}

template <int MI, int NJ>
__global__ void __launch_bounds__(kStagedThreads, StagedShape<MI, NJ>::kMinBlocks)
    grouped_bf16_fp8_gemm_staged_kernel(GroupedBf16Fp8GemmParams p) {
  using Shape = StagedShape<MI, NJ>;
  constexpr int kStages = Shape::kStages, kStageBytes = Shape::kStageBytes, kWTileBytes = Shape::kWTileBytes;
  pdl_wait();
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp % 4, wn = warp / 4;
  const int64_t group = blockIdx.z;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * Shape::kRows;  // row within the group
  const int64_t x_row0 = static_cast<int64_t>(blockIdx.y) * Shape::kTokens;
  const int x_rows = static_cast<int>(min(static_cast<int64_t>(Shape::kTokens), p.tokens - x_row0));
  const int kblocks = static_cast<int>(p.k / kKBlock);
  const float* sw_row = p.w_scale + ((group * p.r + n0) / kKBlock) * p.w_scale_ld;
  const int64_t x_ld = p.groups * p.k;  // elements between tokens

  // This thread's copies per stage: weight chunk tid % 8 of rows tid / 8 + 32 i, x chunk tid % 16
  // of tokens tid / 16 + 16 i.
  const uint8_t* w_src = p.w + (group * p.r + n0 + tid / 8) * p.k + (tid % 8) * 16;
  const uint16_t* x_src = p.x + (x_row0 + tid / 16) * x_ld + group * p.k + (tid % 16) * 8;
  const uint32_t smem0 = shared_address(smem);
  auto load_stage = [&](int step) {
    if (step < kblocks) {
      const int64_t b = staged_block_at(step, kblocks);
      const uint32_t stage = smem0 + static_cast<uint32_t>((step % kStages) * kStageBytes);
#pragma unroll
      for (int i = 0; i < Shape::kRows / 32; ++i) {
        const int row = tid / 8 + 32 * i;
        const bool valid = n0 + row < p.r;
        cp_async16(stage + w_chunk_at(row, tid % 8), valid ? w_src + (32 * i) * p.k + b * kKBlock : p.w, valid);
      }
#pragma unroll
      for (int i = 0; i < Shape::kTokens / 16; ++i) {
        const int row = tid / 16 + 16 * i;
        const bool valid = row < x_rows;
        cp_async16(stage + kWTileBytes + x_chunk_at(row, tid % 16), valid ? x_src + (16 * i) * x_ld + b * kKBlock : p.x,
                   valid);
      }
    }
    cp_async_commit();
  };
  float* sums = reinterpret_cast<float*>(smem + kStages * kStageBytes) + warp * Shape::kOutputsPerLane * 32 + lane;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_stage(s);

  int step = 0;
  for (int pass = 0; pass < 4; ++pass) {
    float q[MI][NJ][4];
    zero_tiles(q);

    for (int b = pass; b < kblocks; b += 4, ++step) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // step's stage is in; every warp is done with step - 1's, which the next load takes
      load_stage(step + kStages - 1);

      const uint8_t* stage = smem + (step % kStages) * kStageBytes;
      float blk[MI][NJ][4];
      zero_tiles(blk);
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // MMA steps 4 half .. 4 half + 3: weight chunk 2t + half
        uint4 a_lo[MI], a_hi[MI];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          const int row = 16 * MI * wm + 16 * i + g;
          a_lo[i] = *reinterpret_cast<const uint4*>(stage + w_chunk_at(row, 2 * t + half));
          a_hi[i] = *reinterpret_cast<const uint4*>(stage + w_chunk_at(row + 8, 2 * t + half));
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {  // x chunk 4t + 2 half + u: steps 4 half + 2u and + 1
          uint4 xb[NJ];
#pragma unroll
          for (int j = 0; j < NJ; ++j)
            xb[j] = *reinterpret_cast<const uint4*>(stage + kWTileBytes +
                                                    x_chunk_at(8 * NJ * wn + 8 * j + g, 4 * t + 2 * half + u));
#pragma unroll
          for (int sub = 0; sub < 2; ++sub) {
            const int word = 2 * u + sub;  // step 4 half + word
#pragma unroll
            for (int i = 0; i < MI; ++i) {
              const uint32_t wa_s = word_of(a_lo[i], word), wb_s = word_of(a_hi[i], word);
              const uint32_t a0 = e4m3x2_to_bf16x2(wa_s & 0xffff), a2 = e4m3x2_to_bf16x2(wa_s >> 16);
              const uint32_t a1 = e4m3x2_to_bf16x2(wb_s & 0xffff), a3 = e4m3x2_to_bf16x2(wb_s >> 16);
#pragma unroll
              for (int j = 0; j < NJ; ++j)
                mma_bf16_f32(blk[i][j], a0, a1, a2, a3, word_of(xb[j], 2 * sub), word_of(xb[j], 2 * sub + 1));
            }
          }
        }
      }
      const float sw = __ldg(sw_row + b);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) q[i][j][c] = fmaf(blk[i][j][c], sw, q[i][j][c]);
    }

    fold_pass(sums, q, pass);
  }
  cp_async_wait<0>();  // no copy may still be landing when the block's shared memory is reused

  for_each_sum<MI, NJ>(sums, [&](int i, int j, int c, const float& sum) {
    const int r = 8 * NJ * wn + 8 * j + 2 * t + (c & 1);
    const int64_t n = n0 + 16 * MI * wm + 16 * i + g + (c >= 2 ? 8 : 0);
    if (r < x_rows && n < p.r) store_float(p.y, ((x_row0 + r) * p.groups + group) * p.r + n, sum);
  });
}

void check_grid(const GroupedBf16Fp8GemmParams& p, int64_t tiles) {
  if (tiles > 65535 || p.groups > 65535)
    throw UsageError("grouped_bf16_fp8_gemm: " + std::to_string(p.tokens) + " tokens in " + std::to_string(p.groups) +
                     " groups exceed one launch (split the call)");
}

template <int MI, int NJ>
void launch_staged(const GroupedBf16Fp8GemmParams& p, cudaStream_t stream) {
  using Shape = StagedShape<MI, NJ>;
  const int64_t tiles = (p.tokens + Shape::kTokens - 1) / Shape::kTokens;
  check_grid(p, tiles);
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(grouped_bf16_fp8_gemm_staged_kernel<MI, NJ>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSharedBytes));
  const dim3 grid(static_cast<unsigned>(p.r / Shape::kRows), static_cast<unsigned>(tiles), static_cast<unsigned>(p.groups));
  launch_pdl(grouped_bf16_fp8_gemm_staged_kernel<MI, NJ>, grid, kStagedThreads, Shape::kSharedBytes, stream, p);
}

// The staged kernels take r a multiple of the decode shapes' 64 rows, from 17 tokens on: up to 16
// the streamed kernel was faster (a 64 x 16 staged shape made the V4-Flash step 0.35 ms slower at
// batch 1 and 0.5 ms at 16; docs/PERF.md, session 16).
constexpr int64_t kRowsPerDecodeShape = StagedShape<1, 2>::kRows;
constexpr int64_t kStagedMinTokens = 17;

// From this many tokens on the 128 x 128 tiles give wo_a 8 row tiles x 3+ token tiles x 8 groups,
// 192 CTAs or more (one an SM): enough to fill the GPU (an estimate; the 64 x 64 shape was not
// measured against it at these sizes).
constexpr int64_t kPrefillShapeMinTokens = 384;

}  // namespace

bool grouped_bf16_fp8_gemm_supports(int64_t r, int64_t k) {
  return r > 0 && r % kRowsPerBlock == 0 && k > 0 && k % kKBlock == 0;
}

void grouped_bf16_fp8_gemm(const GroupedBf16Fp8GemmParams& p, cudaStream_t stream) {
  if (!grouped_bf16_fp8_gemm_supports(p.r, p.k))
    throw UsageError("grouped_bf16_fp8_gemm: r=" + std::to_string(p.r) + ", k=" + std::to_string(p.k) +
                     ": r must be a multiple of 16 and k of 128");
  if (p.tokens == 0 || p.groups == 0) return;
  if (p.r % kRowsPerDecodeShape == 0 && p.tokens >= kStagedMinTokens) {
    if (p.tokens >= kPrefillShapeMinTokens && p.r % PrefillShape::kRows == 0) {
      launch_staged<2, 8>(p, stream);
    } else if (p.tokens > 32) {
      launch_staged<1, 4>(p, stream);
    } else {
      launch_staged<1, 2>(p, stream);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int nt = p.tokens <= 8 ? 1 : p.tokens <= 16 ? 2 : 4;  // the streamed kernel's 8-token tiles
  const int64_t tiles = (p.tokens + 8 * nt - 1) / (8 * nt);
  check_grid(p, tiles);
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
