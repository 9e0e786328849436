// The FP8 block-scaled GEMM on fp16 tensor cores (see fp8_mma_gemm.h for the summation order), in
// two kernels of the same arithmetic: the streamed one for decode, the staged one for prefill.
//
// Streamed: a block of 4 warps owns 16 weight rows (32, two MMA tiles sharing each x operand, for
// the routed experts' e2m1 GEMM on a full GPU and dense calls of 16- and 32-row x tiles) and up to
// 32 x rows; warp j takes the K blocks b with b mod 4 == j and the block adds the four partial
// sums in order at the end. mma.sync m16n8k16 takes the weight rows as A and the x rows as B. Lane
// (g, t) feeds bytes 32t + 4s .. 32t + 4s + 3 of its rows' block to MMA step s as the K positions
// 2t, 2t+1, 2t+8, 2t+9 the fragment layout gives it: any permutation of K applied to both operands
// leaves the products' sum unchanged. Two ways to feed the warps, the same arithmetic:
// - registers: each lane loads its 32 bytes of a K block straight from global memory, one block
//   at a time; many small blocks per SM keep the HBM busy (grids of thousands of blocks, short K);
// - piped (8 x rows): each warp streams its blocks through a pipeline of its own in shared
//   memory (cp.async copies of the weight rows, the x rows and both scales, up to 8 blocks
//   ahead), so a warp has its weight, x and scales in flight at once instead of waiting for x and
//   the scales after each block's weight. A dense GEMM issues its weight copies before it waits
//   for the kernel that writes x (programmatic dependent launch), so those bytes travel while that
//   kernel finishes. Measured at batch 1 (H200, docs/PERF.md): 1.4-1.8x faster than registers for
//   K >= 2048, slower for the 2048-block K = 1024 wq_b.
#include "kernels/gemm/fp8_mma_gemm.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm/e2m1_fp16.cuh"
#include "kernels/gemm/e2m1_layout.h"
#include "kernels/gemm/f16_wgmma_gemm.h"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/gemm/staged_tiles.cuh"
#include "kernels/gemm/wgmma.cuh"
#include "kernels/launch.cuh"
#include "kernels/sm_count.h"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 4;        // K lanes of a block
constexpr int kRowsPerBlock = 16;  // weight rows of a block (one MMA's M)

// The high two codes of a word, the same conversion as e4m3x2_to_f16x2(four_codes >> 16) with no
// shift: the conversion reads the register's upper half.
__device__ __forceinline__ uint32_t high_e4m3x2_to_f16x2(uint32_t four_codes) {
  uint32_t h;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(h) : "r"(four_codes));
  return h;
}

// The low (lane_pair 0) or high (1) two codes of a word as fp16x2, bit for bit what
// e4m3x2_to_f16x2 gives, on integer operations and one exact fp16 multiply instead of the
// conversion unit (core/numeric.h's e4m3x2_spread_to_f16x2_over_256; fp16 keeps subnormals).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2_on_alu(uint32_t four_codes, int lane_pair) {
  const uint32_t spread = __byte_perm(four_codes, 0, lane_pair == 0 ? 0x1404 : 0x3424);
  const uint32_t over_256 = e4m3x2_spread_to_f16x2_over_256(spread);
  uint32_t h;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(h) : "r"(over_256), "r"(0x5C005C00u));  // * 256.0
  return h;
}

__device__ __forceinline__ void mma_f16_f32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The x rows a block takes (blockIdx.y: a tile of the grouped list, or the dense rows
// [blockIdx.y * tile_rows, ...)), the weight they meet and where the results go: blockIdx.x counts
// blocks of `w_rows` weight rows over the first output, then (streamed kernels) the second's.
// false for a grouped tile past the list's real ones.
struct BlockRows {
  int64_t x_row0 = 0;
  int x_rows = 0;
  const uint8_t* w = nullptr;
  const uint8_t* w_shift = nullptr;  // kE2M1
  const float* w_scale = nullptr;
  int64_t w_scale_ld = 0;
  int64_t n0 = 0;  // the block's first weight row
  int64_t n = 0;   // the weight's rows
  MutFloatPtr y;
  int64_t ldy = 0;
};

__device__ __forceinline__ bool block_rows(const Fp8MmaGemmParams& p, int64_t tile_rows, int64_t w_rows,
                                           BlockRows& out) {
  const int64_t first_blocks = (p.n + w_rows - 1) / w_rows;
  const bool second = static_cast<int64_t>(blockIdx.x) >= first_blocks;
  const Fp8MmaOutput& o = second ? p.second : Fp8MmaOutput{p.w, p.w_shift, p.w_scale, p.w_scale_ld, p.y, p.ldy, p.n, 0};
  out.n0 = (static_cast<int64_t>(blockIdx.x) - (second ? first_blocks : 0)) * w_rows;
  out.n = o.n;
  out.y = o.y;
  out.ldy = o.ldy;
  out.w_scale_ld = o.w_scale_ld;
  if (p.tiles != nullptr) {
    if (static_cast<int64_t>(blockIdx.y) >= *p.tile_count) return false;
    const Fp8MmaTile tile = p.tiles[blockIdx.y];
    out.x_row0 = tile.row_begin;
    out.x_rows = tile.rows;
    out.w = p.group_w[tile.group + o.group_offset];
    out.w_scale = p.group_w_scale[tile.group + o.group_offset];
    if (p.group_w_shift != nullptr) out.w_shift = p.group_w_shift[tile.group + o.group_offset];
    return true;
  }
  out.x_row0 = static_cast<int64_t>(blockIdx.y) * tile_rows;
  out.x_rows = static_cast<int>(min(tile_rows, p.m - out.x_row0));
  out.w = o.w;
  out.w_shift = o.w_shift;
  out.w_scale = o.w_scale;
  return true;
}

// The streamed kernel's weight units (fp8_mma_gemm_kernel): 32 e4m3 bytes, or 16 bytes of e2m1
// pairs and their shift byte, a lane's 32 inputs of a row's K block.
template <bool kE2M1>
constexpr uint32_t kLaneUnitBytes = kE2M1 ? 16 : 32;
template <bool kE2M1>
constexpr uint32_t kBlockUnits = kE2M1 ? kE2m1BlockShiftStride : 4;

// The lane's weight of K block b for weight tile m's rows g + 16m (w[m][0]) and g + 16m + 8
// (w[m][1]) at their units: e4m3, the 32 codes; e2m1, the 16 bytes in lo (hi unused), and each
// row's shift byte given to on_shift(m, row, byte) as it is loaded.
template <int MT, bool kE2M1, typename OnShift>
__device__ __forceinline__ void load_lane_weights(const BlockRows& rows, const uint32_t (&unit)[MT][2], int64_t b,
                                                  RowBytes (&w)[MT][2], OnShift on_shift) {
  const uint8_t* const w_block = rows.w + b * kBlockUnits<kE2M1> * kLaneUnitBytes<kE2M1>;
  const uint8_t* const shift_block = kE2M1 ? rows.w_shift + b * kBlockUnits<kE2M1> : nullptr;
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* const w_at = w_block + static_cast<uint64_t>(unit[m][h]) * kLaneUnitBytes<kE2M1>;
      if constexpr (kE2M1) {
        w[m][h].lo = __ldg(reinterpret_cast<const uint4*>(w_at));
        on_shift(m, h, static_cast<uint32_t>(__ldg(shift_block + unit[m][h])));
      } else {
        w[m][h] = load_row_bytes(w_at, true);
      }
    }
}

// MMA step s's A fragments from a weight tile's rows g (w[0]) and g + 8 (w[1]): the lane's inputs
// 4s .. 4s + 3, a0 / a1 (rows g / g + 8) the first two, a2 / a3 the last two. e2m1: those are slots
// 2 (s % 2) and 2 (s % 2) + 1 of the lane's word s / 2, each row's pair given by
// e2m1_pair(word, slot, row); e4m3: word s's low and high code pairs, their fp16 values given to
// e4m3_pair (the streamed kernel's operands as they are, the chained form's scaled into bf16).
template <bool kE2M1, typename E2m1Pair, typename E4m3Pair>
__device__ __forceinline__ void lane_a_fragments(const RowBytes (&w)[2], int s, E2m1Pair e2m1_pair, E4m3Pair e4m3_pair,
                                                 uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  if constexpr (kE2M1) {
    const uint32_t wa_w = w[0].word(s / 2), wb_w = w[1].word(s / 2);
    a0 = e2m1_pair(wa_w, 2 * (s % 2), 0);
    a2 = e2m1_pair(wa_w, 2 * (s % 2) + 1, 0);
    a1 = e2m1_pair(wb_w, 2 * (s % 2), 1);
    a3 = e2m1_pair(wb_w, 2 * (s % 2) + 1, 1);
  } else {
    const uint32_t wa_s = w[0].word(s), wb_s = w[1].word(s);
    a0 = e4m3_pair(e4m3x2_to_f16x2(wa_s & 0xffff));
    a2 = e4m3_pair(high_e4m3x2_to_f16x2(wa_s));
    a1 = e4m3_pair(e4m3x2_to_f16x2(wb_s & 0xffff));
    a3 = e4m3_pair(high_e4m3x2_to_f16x2(wb_s));
  }
}

// kChained's lane q of the streamed kernel (fp8_mma_gemm_kernel): the warp's K blocks b = warp,
// warp + 4, .. in ascending order, each block's eight MMA steps accumulating into q. unit: the
// lane's weight units (fp8_mma_gemm_kernel); sw_row: the weight tile's row of block scales.
template <int NT, bool kE2M1, int MT>
__device__ __forceinline__ void chained_streamed_lane(const Fp8MmaGemmParams& p, const BlockRows& rows,
                                                      const uint32_t (&unit)[MT][2], const float* sw_row, int warp,
                                                      int g, int t, float (&q)[MT][NT][4]) {
  const int64_t kblocks = p.k / 128;
  const uint16_t* x_at[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) x_at[j] = p.x16 + (rows.x_row0 + min(8 * j + g, rows.x_rows - 1)) * p.k + 32 * t;
  for (int64_t b = warp; b < kblocks; b += kWarps) {
    const float sw = __ldg(sw_row + b);
    RowBytes w[MT][2];
    uint32_t scale[MT][2];  // e2m1: the rows' bf16x2 2^shift x sw
    load_lane_weights<MT, kE2M1>(rows, unit, b, w,
                                 [&](int m, int h, uint32_t shift) { scale[m][h] = e2m1_bf16x2_scale(shift, sw); });
    Bf16x32 xv[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) xv[j] = load_bf16x32(x_at[j] + b * 128, true);
#pragma unroll
    for (int s = 0; s < 8; ++s)
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        uint32_t a0, a1, a2, a3;
        lane_a_fragments<kE2M1>(
            w[m], s, [&](uint32_t word, int slot, int row) { return e2m1_slot_to_bf16x2(word, slot, scale[m][row]); },
            [&](uint32_t f16_pair) { return f16x2_codes_to_scaled_bf16x2(f16_pair, sw); }, a0, a1, a2, a3);
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_bf16_f32(q[m][j], a0, a1, a2, a3, xv[j].word(2 * s), xv[j].word(2 * s + 1));
      }
  }
}

// The routed experts' decode GEMM (e2m1, 8-row x tiles) is held to 64 registers, 8 blocks an SM,
// with one weight tile (with 72 its batch-64 step took 0.3 ms longer, docs/PERF.md, session 15) and
// to 80, 6 blocks an SM, with two (8 blocks spilled and took 3 ms longer at batch 64, session 17).
//
// kChained (Fp8MmaKernel::kChainedStreamed): the chained order's arithmetic on the same loads of the
// weight. x comes as bf16 values with their scales folded in, in x's own K order (x16: the lane's
// 32 values of a block are its 64 bytes at 64 t), the lane converts its weight pairs into bf16
// with the block scale (e4m3) or the shift and block scale (e2m1) folded in, and each warp's MMAs
// accumulate straight into its lane q (no block sum, no fmaf): the chained WGMMA kernels' bits.
template <int NT, bool kE2M1, int MT = 1, bool kChained = false>  // 8-row x tiles, 16-row weight tiles a block
__global__ void __launch_bounds__(kWarps * 32, kE2M1 && NT == 1 ? (MT == 1 ? 8 : 6) : 1) fp8_mma_gemm_kernel(Fp8MmaGemmParams p) {
  pdl_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  BlockRows rows;
  if (!block_rows(p, 8 * NT, kRowsPerBlock * MT, rows)) return;
  const int64_t x_row0 = rows.x_row0;
  const int x_rows = rows.x_rows;
  const int64_t n0 = rows.n0;
  const int64_t kblocks = p.k / 128;
  // The lane's 32 inputs of a block: 32 e4m3 bytes, or 16 bytes of e2m1 pairs and their shift. In
  // units of a row's shift bytes (K / 32 a row), the lane's inputs of K block 0 in a weight row n
  // sit at unit n K / 32 + t: byte 32 unit (e4m3) or 16 unit (e2m1), shift byte unit; K block b
  // adds 4b units. kE2M1 rows sit in K-block tiles of 16 rows instead (e2m1_layout.h): unit
  // e2m1_row_shifts_at(n) + t, and K block b adds a tile's 64 shift bytes b times. 32-bit units keep
  // the loop's registers (and 64-bit address arithmetic) few. A weight row past the weight's end
  // (or an x row past the tile's) reads the last one instead, so that the loop needs no bounds
  // checks: its sums are never stored.
  static_assert(!kE2M1 || kE2m1BlockCodeStride == kE2m1BlockShiftStride * kLaneUnitBytes<kE2M1>,
                "a K block of e2m1 codes is 16 bytes per shift byte");
  uint32_t unit[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g + 16m (h = 0, a0 / a2) and g + 16m + 8 (h = 1, a1 / a3)
      const int64_t n = min(n0 + 16 * m + 8 * h + g, rows.n - 1);
      unit[m][h] = static_cast<uint32_t>((kE2M1 ? e2m1_row_shifts_at(n, p.k) : n * (p.k / 32)) + t);
    }
  const uint8_t* x_at[NT];
  // The accumulator's columns: x rows 8j + 2t and 8j + 2t + 1, for their scales (kChained reads
  // neither x_at nor these).
  int64_t xs_row[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    x_at[j] = p.x + (x_row0 + min(8 * j + g, x_rows - 1)) * p.k + 32 * t;
    xs_row[j][0] = x_row0 + min(8 * j + 2 * t, x_rows - 1);
    xs_row[j][1] = x_row0 + min(8 * j + 2 * t + 1, x_rows - 1);
  }
  const float* sw_row = rows.w_scale + (n0 / 128) * rows.w_scale_ld;

  float q[MT][NT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j) q[m][j][0] = q[m][j][1] = q[m][j][2] = q[m][j][3] = 0.0f;

  if constexpr (kChained) {
    chained_streamed_lane<NT, kE2M1, MT>(p, rows, unit, sw_row, warp, g, t, q);
  } else {
    for (int64_t b = warp; b < kblocks; b += kWarps) {
      RowBytes w[MT][2];
      uint32_t scale[MT][2];  // e2m1: the rows' fp16x2 2^shift
      load_lane_weights<MT, kE2M1>(rows, unit, b, w,
                                   [&](int m, int h, uint32_t shift) { scale[m][h] = pow2_f16x2(shift); });
      RowBytes xb[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) xb[j] = load_row_bytes(x_at[j] + b * 128, true);
      float blk[MT][NT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j) blk[m][j][0] = blk[m][j][1] = blk[m][j][2] = blk[m][j][3] = 0.0f;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        uint32_t x0[NT], x1[NT];  // step s's B operands, converted once for the MT weight tiles
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t x_s = xb[j].word(s);
          x0[j] = e4m3x2_to_f16x2(x_s & 0xffff);
          x1[j] = high_e4m3x2_to_f16x2(x_s);
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          uint32_t a0, a1, a2, a3;
          lane_a_fragments<kE2M1>(
              w[m], s, [&](uint32_t word, int slot, int row) { return e2m1_slot_to_f16x2(word, slot, scale[m][row]); },
              [](uint32_t f16_pair) { return f16_pair; }, a0, a1, a2, a3);
#pragma unroll
          for (int j = 0; j < NT; ++j) mma_f16_f32(blk[m][j], a0, a1, a2, a3, x0[j], x1[j]);
        }
      }
      const float sw = kE2M1 ? __ldg(sw_row + b) * kE2M1ScaleBack : __ldg(sw_row + b);
      const float* const xs_block = p.x_scale + b * p.x_scale_ld;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float s0 = sw * __ldg(xs_block + xs_row[j][0]), s1 = sw * __ldg(xs_block + xs_row[j][1]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          q[m][j][0] = fmaf(blk[m][j][0], s0, q[m][j][0]);
          q[m][j][1] = fmaf(blk[m][j][1], s1, q[m][j][1]);
          q[m][j][2] = fmaf(blk[m][j][2], s0, q[m][j][2]);
          q[m][j][3] = fmaf(blk[m][j][3], s1, q[m][j][3]);
        }
      }
    }
  }

  // sum_lanes_and_store's tiles are the MT x NT accumulators, tile i = NT m + j at its x rows
  // 8i .. 8i + 7.
  sum_lanes_and_store<kWarps, MT * NT>(reinterpret_cast<const float(&)[MT * NT][4]>(q), [&](int tile_r, int row, float sum) {
    const int tile = tile_r / 8, r = 8 * (tile % NT) + tile_r % 8;
    const int64_t n = n0 + 16 * (tile / NT) + row;
    if (r < x_rows && n < rows.n) store_float(rows.y, (x_row0 + r) * rows.ldy + n, sum);
  });
}

// A streamed block's pipeline stage (one warp's K block): 16 weight rows and NT * 8 x rows of 128
// bytes each (16-byte chunk c of row r at chunk c ^ (r % 8), so that the fragment loads of a
// quarter warp hit distinct banks), the x rows' scales and the weight block's scale. A warp has
// kStages of them. kChained: the x rows are x16's 256 bytes (scaled bf16 values, x's own order;
// chunk c of row r at chained_x_chunk(r, c)) and carry no scales.
template <int NT, int Stages, bool kChained = false>
struct StreamStage {
  static constexpr int kStages = Stages;
  static constexpr int kXRows = 8 * NT;
  static constexpr int kXRowBytes = kChained ? 256 : 128;
  static constexpr int kX = 16 * 128;                         // offset of the x rows
  static constexpr int kXScales = kX + kXRows * kXRowBytes;   // offset of the x rows' scales
  static constexpr int kWScale = kXScales + (kChained ? 0 : kXRows * 4);
  static constexpr int kBytes = (kWScale + 4 + 127) / 128 * 128;
  static constexpr int kBlockBytes = kWarps * kStages * kBytes;  // dynamic shared memory of a block
};

// Byte offset of 16-byte chunk c of row r in a stage's 128-byte-row tile.
__device__ __forceinline__ uint32_t swizzled(int r, int c) { return static_cast<uint32_t>(r * 128 + ((c ^ (r % 8)) << 4)); }

// Byte offset of 16-byte chunk c (0..15) of row r in a kChained stage's 256-byte x rows: lane
// (g, t) reads chunks 4 t + 2 half and 4 t + 2 half + 1 of row g (inputs 32 t + 16 half ..), and
// at c ^ ((r % 2) | (c / 8) * 2) the eight lanes of a quarter warp (rows 2i, 2i + 1, t = 0..3) hit
// eight distinct bank groups.
__device__ __forceinline__ uint32_t chained_x_chunk(int r, int c) {
  return static_cast<uint32_t>(r * 256 + ((c ^ ((r % 2) | (c / 8) * 2)) << 4));
}

// kChained's K block of the piped kernel (fp8_mma_gemm_piped_kernel): the stage's weight rows g,
// g + 8 (the lane's chunk 2 t + half, as the kernel reads them) converted into bf16 with the block
// scale sw folded in, against x rows 8 j + g's values (x_rows: the stage's x rows), each MMA step
// accumulating into q: MMA step 4 half + w takes the lane's inputs 32 t + 16 half + 4 w .. + 3, as
// the streamed kernel's.
template <int NT>
__device__ __forceinline__ void chained_piped_step(const uint8_t* stage, const uint8_t* x_rows, float sw, int g, int t,
                                                   float (&q)[NT][4]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint4 w_lo = *reinterpret_cast<const uint4*>(stage + swizzled(g, 2 * t + half));
    const uint4 w_hi = *reinterpret_cast<const uint4*>(stage + swizzled(g + 8, 2 * t + half));
    uint4 xv[NT][2];  // inputs 32 t + 16 half + 8 e .. + 7 of x row 8 j + g
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        xv[j][e] = *reinterpret_cast<const uint4*>(x_rows + chained_x_chunk(8 * j + g, 4 * t + 2 * half + e));
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t wa_s = word_of(w_lo, w), wb_s = word_of(w_hi, w);
      const uint32_t a0 = f16x2_codes_to_scaled_bf16x2(e4m3x2_to_f16x2(wa_s & 0xffff), sw);
      const uint32_t a2 = f16x2_codes_to_scaled_bf16x2(e4m3x2_to_f16x2(wa_s >> 16), sw);
      const uint32_t a1 = f16x2_codes_to_scaled_bf16x2(e4m3x2_to_f16x2(wb_s & 0xffff), sw);
      const uint32_t a3 = f16x2_codes_to_scaled_bf16x2(e4m3x2_to_f16x2(wb_s >> 16), sw);
#pragma unroll
      for (int j = 0; j < NT; ++j)
        mma_bf16_f32(q[j], a0, a1, a2, a3, word_of(xv[j][w / 2], 2 * (w % 2)), word_of(xv[j][w / 2], 2 * (w % 2) + 1));
    }
  }
}

template <int NT, int Stages, bool kChained = false>  // 8-row x tiles per block, pipeline stages per warp
__global__ void __launch_bounds__(kWarps * 32) fp8_mma_gemm_piped_kernel(Fp8MmaGemmParams p) {
  using Stage = StreamStage<NT, Stages, kChained>;
  extern __shared__ __align__(128) uint8_t stream_smem[];
  // A grouped GEMM's tiles (and so its weights) are the previous kernel's output; a dense one's
  // weights are known before it.
  const bool grouped = p.tiles != nullptr;
  if (grouped) pdl_wait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  BlockRows rows;
  if (!block_rows(p, 8 * NT, kRowsPerBlock, rows)) return;
  const int64_t x_row0 = rows.x_row0;
  const int x_rows = rows.x_rows;
  const int64_t n0 = rows.n0;
  const int64_t kblocks = p.k / 128;
  const int64_t steps = kblocks > warp ? (kblocks - warp + kWarps - 1) / kWarps : 0;  // this warp's blocks
  uint8_t* const stages = stream_smem + warp * Stage::kStages * Stage::kBytes;
  const uint32_t stages_at = shared_address(stages);
  const float* sw_row = rows.w_scale + (n0 / 128) * rows.w_scale_ld;

  // Step i's copies into stage i % kStages (K block warp + 4i); none past the warp's blocks.
  auto copy_weight = [&](int64_t i) {
    if (i >= steps) return;
    const int64_t b = warp + kWarps * i;
    const uint32_t stage = stages_at + static_cast<uint32_t>((i % Stage::kStages) * Stage::kBytes);
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // 16 rows x 8 chunks
      const int idx = lane + 32 * c, row = idx / 8, chunk = idx % 8;
      const bool valid = n0 + row < rows.n;
      cp_async16(stage + swizzled(row, chunk), valid ? rows.w + (n0 + row) * p.k + b * 128 + chunk * 16 : rows.w,
                 valid);
    }
    if (lane == 0) cp_async4(stage + Stage::kWScale, sw_row + b, true);
  };
  auto copy_x = [&](int64_t i) {
    if (i >= steps) return;
    const int64_t b = warp + kWarps * i;
    const uint32_t stage = stages_at + static_cast<uint32_t>((i % Stage::kStages) * Stage::kBytes);
    if constexpr (kChained) {
#pragma unroll
      for (int c = 0; c < 4 * NT; ++c) {  // 8 NT rows x 16 chunks
        const int idx = lane + 32 * c, row = idx / 16, chunk = idx % 16;
        const bool valid = row < x_rows;
        cp_async16(stage + Stage::kX + chained_x_chunk(row, chunk),
                   valid ? p.x16 + (x_row0 + row) * p.k + b * 128 + chunk * 8 : p.x16, valid);
      }
    } else {
#pragma unroll
      for (int c = 0; c < 2 * NT; ++c) {  // 8 NT rows x 8 chunks
        const int idx = lane + 32 * c, row = idx / 8, chunk = idx % 8;
        const bool valid = row < x_rows;
        cp_async16(stage + Stage::kX + swizzled(row, chunk),
                   valid ? p.x + (x_row0 + row) * p.k + b * 128 + chunk * 16 : p.x, valid);
      }
      if (lane < Stage::kXRows) {
        const bool valid = lane < x_rows;
        cp_async4(stage + Stage::kXScales + 4 * lane, valid ? p.x_scale + b * p.x_scale_ld + x_row0 + lane : p.x_scale,
                  valid);
      }
    }
  };

  // Commit order: the first kStages steps' weights, then their x, then one group per step with
  // step i + kStages's weight and x. Step i needs the groups up to its x (group kStages + i) of
  // the 2 kStages + i committed when it starts: at most kStages - 1 may still be pending.
#pragma unroll
  for (int i = 0; i < Stage::kStages; ++i) {
    copy_weight(i);
    cp_async_commit();
  }
  if (!grouped) pdl_wait();
#pragma unroll
  for (int i = 0; i < Stage::kStages; ++i) {
    copy_x(i);
    cp_async_commit();
  }

  float q[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) q[j][0] = q[j][1] = q[j][2] = q[j][3] = 0.0f;

  for (int64_t i = 0; i < steps; ++i) {
    cp_async_wait<Stage::kStages - 1>();
    __syncwarp();  // every lane's copies of the stage are in
    const uint8_t* stage = stages + (i % Stage::kStages) * Stage::kBytes;
    if constexpr (kChained) {
      const float sw = *reinterpret_cast<const float*>(stage + Stage::kWScale);
      chained_piped_step<NT>(stage, stage + Stage::kX, sw, g, t, q);
    } else {
      float blk[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j) blk[j][0] = blk[j][1] = blk[j][2] = blk[j][3] = 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // MMA steps 4 half .. 4 half + 3: the lane's chunk 2t + half
        const uint4 w_lo = *reinterpret_cast<const uint4*>(stage + swizzled(g, 2 * t + half));
        const uint4 w_hi = *reinterpret_cast<const uint4*>(stage + swizzled(g + 8, 2 * t + half));
        uint4 xv[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j)
          xv[j] = *reinterpret_cast<const uint4*>(stage + Stage::kX + swizzled(8 * j + g, 2 * t + half));
#pragma unroll
        for (int word = 0; word < 4; ++word) {
          const uint32_t wa_s = word_of(w_lo, word), wb_s = word_of(w_hi, word);
          const uint32_t a0 = e4m3x2_to_f16x2(wa_s & 0xffff), a2 = e4m3x2_to_f16x2(wa_s >> 16);
          const uint32_t a1 = e4m3x2_to_f16x2(wb_s & 0xffff), a3 = e4m3x2_to_f16x2(wb_s >> 16);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            const uint32_t x_s = word_of(xv[j], word);
            mma_f16_f32(blk[j], a0, a1, a2, a3, e4m3x2_to_f16x2(x_s & 0xffff), e4m3x2_to_f16x2(x_s >> 16));
          }
        }
      }
      const float sw = *reinterpret_cast<const float*>(stage + Stage::kWScale);
      const auto* xs = reinterpret_cast<const float*>(stage + Stage::kXScales);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        // The accumulator's columns are x rows 8j + 2t and 8j + 2t + 1.
        const int r0 = 8 * j + 2 * t, r1 = r0 + 1;
        const float s0 = r0 < x_rows ? sw * xs[r0] : 0.0f;
        const float s1 = r1 < x_rows ? sw * xs[r1] : 0.0f;
        q[j][0] = fmaf(blk[j][0], s0, q[j][0]);
        q[j][1] = fmaf(blk[j][1], s1, q[j][1]);
        q[j][2] = fmaf(blk[j][2], s0, q[j][2]);
        q[j][3] = fmaf(blk[j][3], s1, q[j][3]);
      }
    }
    __syncwarp();  // every lane is done with the stage before the copies refill it
    copy_weight(i + Stage::kStages);
    copy_x(i + Stage::kStages);
    cp_async_commit();
  }
  cp_async_wait<0>();  // no copy may still be landing when the block's shared memory is reused

  sum_lanes_and_store<kWarps, NT>(q, [&](int r, int row, float sum) {
    const int64_t n = n0 + row;
    if (r < x_rows && n < rows.n) store_float(rows.y, (x_row0 + r) * rows.ldy + n, sum);
  });
}

// ---- The staged kernel (prefill) ----
//
// A CTA of 8 warps owns 128 weight rows [n0, n0 + 128) and 128 x rows; each K block's two 128 x
// 128-byte tiles (and the x rows' scales) come into shared memory with cp.async, kStages blocks
// ahead, so every operand byte crosses L2 once per CTA instead of once per warp. Warp (wm, wn) =
// (warp % 2, warp / 2) computes weight rows 64 wm .. 64 wm + 63 (four m16 tiles i) against x rows
// 32 wn .. 32 wn + 31 (four n8 tiles j). The CTA walks the K blocks in the order
// 0, 4, 8, ..; 1, 5, 9, ..; 2, ..; 3, .. so that one register q per output suffices: pass p
// accumulates lane q_p exactly as the streamed kernel's warp p does, and at the pass's end the
// running sum in shared memory becomes q_0 (p = 0) or sum + q_p, which is the streamed kernel's
// ((q_0 + q_1) + q_2) + q_3.
//
// Fragments (PTX ISA, mma.m16n8k16 with .f16 A/B, g = lane / 4, t = lane % 4): A regs a0 = (row g,
// k 2t..2t+1), a1 = (row g+8, k 2t..2t+1), a2 = (row g, k 2t+8..2t+9), a3 = (row g+8, k 2t+8..2t+9);
// B regs b0 = (k 2t..2t+1, column g), b1 = (k 2t+8..2t+9, column g); C/D c0 = (row g, column 2t),
// c1 = (g, 2t+1), c2 = (g+8, 2t), c3 = (g+8, 2t+1). As in the streamed kernel, the word s of a
// lane's 32 bytes (bytes 32t + 4s .. 32t + 4s + 3 of the K block) gives {a0 | b0} from its low two
// bytes and {a2 | b1} from its high two, for MMA step s. Those 32 bytes are the row's 16-byte
// chunks 2t (s = 0..3) and 2t + 1 (s = 4..7), read with one 128-bit shared load each.
//
// Shared layout of one tile: row r's 128 bytes at r * 128, its 16-byte chunk c stored at chunk
// c ^ (r % 8). A 128-bit load is served a quarter warp at a time: lanes 8h .. 8h + 7 are rows
// g = 2h, 2h + 1 (rows of a tile start at multiples of 8, so r % 8 = g) with t = 0..3, asking for
// chunk 2t + half; the XOR with g puts the even row on the chunks of one parity and the odd row on
// the other, eight distinct chunks, no bank conflict.
//
// kE2M1 weights: a stage holds the weight's K block as stored instead of the e4m3 w tile, row r's
// 64 bytes of e2m1_mma_order's pairs at r * 64 (unswizzled) and its four shift bytes at
// kE2M1ShiftsAt + 4r, and the CTA converts it once into an e4m3 w tile of the layout above
// holding the lossless cast's codes (e2m1_word_to_e4m3, checked against loader/weights.h's cast on
// the CPU), which the MMAs read as they read e4m3 weights, with the cast's block scale: the same
// operands as the cast's on this kernel, so the same bits. Every weight element is converted once
// per CTA, not once per warp that reads it (four). Two converted tiles take turns outside the
// stages: the step that multiplies block b converts the next step's block into the other tile,
// weight rows 0..63 after the MMAs of its first half (MMA steps 0..3) and rows 64..127 after the
// second's, so that the integer work overlaps the tensor cores'; the step's one barrier orders a
// tile's writes (step s - 1) before its reads (step s) and those before its next writes (step
// s + 1). The last step converts its own block again into the idle tile, which nothing reads, so
// that the loop needs no branch. Thread tid converts the 32 inputs (16-byte chunk) tid % 4 of
// weight rows tid / 4 and tid / 4 + 64: its loads from the stage are consecutive 16-byte chunks
// across the warp; its two 16-byte stores (output chunks 2 (tid % 4) and that + 1) give a quarter
// warp's rows r, r + 1 chunks of opposite parities, no bank conflict. A step needs the next step's
// stage landed (for its conversion), one step earlier than e4m3 needs it; the stages being smaller
// (25 KiB, not 32.5), kE2M1 keeps five of them, so that a stage's copies start as many steps
// before their first reader as e4m3's four stages allow.
constexpr int kStagedWarps = 8;
constexpr int kStagedThreads = kStagedWarps * 32;
constexpr int kStagedWRows = 128;  // weight rows of a CTA (one weight scale block)
constexpr int kStagedXRows = 128;  // x rows of a CTA
constexpr int kTileBytes = 128 * 128;
constexpr int kOutputsPerLane = 4 * 4 * 4;  // m16 tiles x n8 tiles x accumulator registers
constexpr int kSumBytes = kStagedWarps * kOutputsPerLane * 32 * static_cast<int>(sizeof(float));
constexpr int kE2M1RowBytes = 64;                           // a kE2M1 weight row's bytes of one K block
constexpr int kE2M1ShiftsAt = kStagedWRows * kE2M1RowBytes;  // the shift bytes' offset in a kE2M1 stage

// The staged kernel's shared memory: kStages stages of [w][x tile][the x rows' 128 scales] (w:
// the e4m3 tile, or kE2M1's rows and shifts), then the running sums, then (kE2M1) the two
// converted w tiles: 4 x 33,280 + 65,536 = 198,656 bytes for e4m3 weights, 5 x 25,600 + 65,536 +
// 2 x 16,384 = 226,304 for kE2M1.
template <bool E2M1>
struct StagedLayout {
  static constexpr int kStages = E2M1 ? 5 : 4;
  static constexpr int kX = E2M1 ? kE2M1ShiftsAt + kStagedWRows * 4 : kTileBytes;  // the x tile's offset in a stage
  static constexpr int kXScales = kX + kTileBytes;
  static constexpr int kStageBytes = kXScales + kStagedXRows * static_cast<int>(sizeof(float));
  static constexpr int kSums = kStages * kStageBytes;
  static constexpr int kConverted = kSums + kSumBytes;
  static constexpr int kSharedBytes = kConverted + (E2M1 ? 2 * kTileBytes : 0);  // one CTA per SM
  static_assert(kSharedBytes <= 227 * 1024, "the staged kernel's shared memory exceeds Hopper's 227 KiB");
  static_assert(kX % 128 == 0 && kStageBytes % 128 == 0 && kConverted % 128 == 0, "tiles keep 128-byte alignment");
};
static_assert(StagedLayout<false>::kSharedBytes == 198656 && StagedLayout<true>::kSharedBytes == 226304,
              "the byte counts the comments above give");

// One thread's share (of kStagedThreads) of bringing K block b's weight and x tiles into a stage
// laid out as StagedLayout<E2M1>'s: 16-byte chunk tid % 8 of x tile rows tid / 8 + 32 i (i =
// 0..3) and (threads 0..127) the scale of x row tid; e4m3 weights: the same chunks of the w tile's
// rows (they share row % 8, so their swizzled chunk offsets differ by 32 rows exactly); kE2M1:
// 16-byte chunk tid % 4 of weight rows tid / 4 + 64 i (i = 0, 1) and (threads 128..255) the four
// shift bytes of weight row tid - 128. Rows past the weight's or the tile's end are zero-filled.
template <bool E2M1>
struct StagedTileCopy {
  __device__ StagedTileCopy(const Fp8MmaGemmParams& params, const BlockRows& block, int thread)
      : p(params), rows(block), tid(thread) {
    const int row = tid / 8, chunk = tid % 8;
    dst = static_cast<uint32_t>(row * 128 + ((chunk ^ (row % 8)) << 4));
    if constexpr (E2M1) {
      w_src = rows.w + e2m1_row_codes_at(rows.n0 + tid / 4, p.k) + (tid % 4) * 16;
      shift_src = rows.w_shift + e2m1_row_shifts_at(rows.n0 + tid % kStagedWRows, p.k);
    } else {
      w_src = rows.w + (rows.n0 + row) * p.k + chunk * 16;
    }
    x_src = p.x + (rows.x_row0 + row) * p.k + chunk * 16;
  }
  __device__ void operator()(uint32_t stage, int64_t b) const {
    using Layout = StagedLayout<E2M1>;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = tid / 8 + 32 * i;
      const uint32_t at = stage + dst + static_cast<uint32_t>(i * 32 * 128);
      if constexpr (!E2M1) {
        const bool w_valid = rows.n0 + row < rows.n;
        cp_async16(at, w_valid ? w_src + (32 * i) * p.k + b * 128 : rows.w, w_valid);
      }
      const bool x_valid = row < rows.x_rows;
      cp_async16(at + Layout::kX, x_valid ? x_src + (32 * i) * p.k + b * 128 : p.x, x_valid);
    }
    if constexpr (E2M1) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // chunk tid % 4 of row tid / 4 + 64 i lands at 16 tid + 64 i * 64
        // (64 rows on: four tiles of 16, the same bytes as 64 rows of k / 2)
        const bool valid = rows.n0 + tid / 4 + 64 * i < rows.n;
        cp_async16(stage + static_cast<uint32_t>(16 * tid + 64 * i * kE2M1RowBytes),
                   valid ? w_src + (64 * i) * (p.k / 2) + b * kE2m1BlockCodeStride : rows.w, valid);
      }
      if (tid >= kStagedThreads - kStagedWRows) {
        const int row = tid % kStagedWRows;
        const bool valid = rows.n0 + row < rows.n;
        cp_async4(stage + static_cast<uint32_t>(kE2M1ShiftsAt + 4 * row),
                  valid ? shift_src + kE2m1BlockShiftStride * b : rows.w_shift, valid);
      }
    }
    if (tid < kStagedXRows) {
      const bool valid = tid < rows.x_rows;
      cp_async4(stage + Layout::kXScales + 4 * tid,
                valid ? p.x_scale + b * p.x_scale_ld + rows.x_row0 + tid : p.x_scale, valid);
    }
  }
  const Fp8MmaGemmParams& p;
  const BlockRows& rows;
  int tid;
  uint32_t dst = 0;
  const uint8_t* w_src = nullptr;
  const uint8_t* shift_src = nullptr;  // kE2M1
  const uint8_t* x_src = nullptr;
};

// kE2M1: thread tid's part of converting a stage's weight rows into an e4m3 w tile (see above):
// inputs 32 (tid % 4) .. 32 (tid % 4) + 31 of weight row tid / 4 + 64 h.
__device__ __forceinline__ void convert_e2m1_rows(const uint8_t* stage, uint8_t* tile, int tid, int h) {
  const int row = tid / 4 + 64 * h, group = tid % 4;
  const uint4 codes = *reinterpret_cast<const uint4*>(stage + row * kE2M1RowBytes + 16 * group);
  const E2m1Magnitudes magnitudes = e2m1_magnitudes_as_e4m3(stage[kE2M1ShiftsAt + 4 * row + group]);
  const E4m3x8 c0 = e2m1_word_to_e4m3(codes.x, magnitudes), c1 = e2m1_word_to_e4m3(codes.y, magnitudes);
  const E4m3x8 c2 = e2m1_word_to_e4m3(codes.z, magnitudes), c3 = e2m1_word_to_e4m3(codes.w, magnitudes);
  auto* const chunks = reinterpret_cast<uint4*>(tile + row * 128);
  const int chunk = (2 * group) ^ (row % 8);  // output chunk 2 group; 2 group + 1 is chunk ^ 1
  chunks[chunk] = make_uint4(c0.first, c0.second, c1.first, c1.second);
  chunks[chunk ^ 1] = make_uint4(c2.first, c2.second, c3.first, c3.second);
}

// IntegerX: the x fragments' conversions on the integer units (e4m3x2_to_f16x2_on_alu), the
// weight's on the conversion unit, so that the two pipes share the work; the same bits. E2M1: the
// weight's codes are kE2M1's (Fp8MmaWeightCodes), converted to e4m3 tiles as described above.
template <bool IntegerX, bool E2M1>
__global__ void __launch_bounds__(kStagedThreads, 1) fp8_mma_gemm_staged_kernel(Fp8MmaGemmParams p) {
  using Layout = StagedLayout<E2M1>;
  constexpr int kStages = Layout::kStages;
  pdl_wait();
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp % 2, wn = warp / 2;

  BlockRows rows;
  if (!block_rows(p, kStagedXRows, kStagedWRows, rows)) return;
  const int64_t x_row0 = rows.x_row0;
  const int x_rows = rows.x_rows;
  const float* w_scale = rows.w_scale;
  const int64_t n0 = rows.n0;
  const int kblocks = static_cast<int>(p.k / 128);
  const float* sw_row = w_scale + (n0 / 128) * rows.w_scale_ld;

  const StagedTileCopy<E2M1> copy(p, rows, tid);
  const uint32_t smem0 = shared_address(smem);
  auto load_stage = [&](int step) {
    copy(smem0 + static_cast<uint32_t>((step % kStages) * Layout::kStageBytes), staged_block_at(step, kblocks));
  };

  // Byte offsets (within the w tile) of this lane's chunk 2t + half of its first A row, for MMA
  // steps 4 half .. 4 half + 3, and (within a stage) of the same chunk of its first B row; m16
  // tile i adds 16 A rows, the A fragment's row g + 8 adds 8, n8 tile j adds 8 * 128 bytes.
  uint32_t a_offset[2], b_offset[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t chunk = static_cast<uint32_t>(((2 * t + half) ^ g) << 4);
    a_offset[half] = static_cast<uint32_t>((64 * wm + g) * 128) + chunk;
    b_offset[half] = static_cast<uint32_t>(Layout::kX + (32 * wn + g) * 128) + chunk;
  }
  float* sums = reinterpret_cast<float*>(smem + Layout::kSums) + warp * kOutputsPerLane * 32 + lane;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kblocks) load_stage(s);
    cp_async_commit();
  }
  if constexpr (E2M1) {  // step 0's block into converted tile 0
    cp_async_wait<kStages - 2>();
    __syncthreads();
    convert_e2m1_rows(smem, smem + Layout::kConverted, tid, 0);
    convert_e2m1_rows(smem, smem + Layout::kConverted, tid, 1);
  }

  int step = 0;
  for (int pass = 0; pass < 4; ++pass) {
    float q[4][4][4];
    zero_tiles(q);

    for (int b = pass; b < kblocks; b += 4, ++step) {
      // Step's stage is in (kE2M1: the next step's too, for its conversion); every warp is done
      // with step - 1's, which the next load takes (kE2M1: and with the converted tile it read).
      cp_async_wait<E2M1 ? kStages - 3 : kStages - 2>();
      __syncthreads();
      if (step + kStages - 1 < kblocks) load_stage(step + kStages - 1);
      cp_async_commit();

      const uint8_t* stage = smem + (step % kStages) * Layout::kStageBytes;
      const uint8_t* w_tile = E2M1 ? smem + Layout::kConverted + (step % 2) * kTileBytes : stage;
      const float sw = __ldg(sw_row + b);
      float blk[4][4][4];
      zero_tiles(blk);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // B for MMA steps s = 4 half + word: n8 tile j's row g, converted once for all four m16 tiles.
        uint32_t b0[4][4], b1[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint4 xb = *reinterpret_cast<const uint4*>(stage + b_offset[half] + j * 8 * 128);
#pragma unroll
          for (int word = 0; word < 4; ++word) {
            const uint32_t x_s = word_of(xb, word);
            b0[word][j] = IntegerX ? e4m3x2_to_f16x2_on_alu(x_s, 0) : e4m3x2_to_f16x2(x_s & 0xffff);
            b1[word][j] = IntegerX ? e4m3x2_to_f16x2_on_alu(x_s, 1) : high_e4m3x2_to_f16x2(x_s);
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // m16 tile i: rows g and g + 8
          const uint8_t* a = w_tile + a_offset[half] + i * 16 * 128;
          const uint4 a_lo = *reinterpret_cast<const uint4*>(a);
          const uint4 a_hi = *reinterpret_cast<const uint4*>(a + 8 * 128);
#pragma unroll
          for (int word = 0; word < 4; ++word) {
            const uint32_t wa_s = word_of(a_lo, word), wb_s = word_of(a_hi, word);
            const uint32_t a0 = e4m3x2_to_f16x2(wa_s & 0xffff), a2 = high_e4m3x2_to_f16x2(wa_s);
            const uint32_t a1 = e4m3x2_to_f16x2(wb_s & 0xffff), a3 = high_e4m3x2_to_f16x2(wb_s);
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_f16_f32(blk[i][j], a0, a1, a2, a3, b0[word][j], b1[word][j]);
          }
        }
        if constexpr (E2M1)  // the next step's block (the last step's own again) into the other tile
          convert_e2m1_rows(smem + (min(step + 1, kblocks - 1) % kStages) * Layout::kStageBytes,
                            smem + Layout::kConverted + ((step + 1) % 2) * kTileBytes, tid, half);
      }
      const float* sx = reinterpret_cast<const float*>(stage + Layout::kXScales);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // The accumulator's columns are x rows 32 wn + 8j + 2t and that + 1 (zero-filled past x_rows).
        const float2 sx01 = *reinterpret_cast<const float2*>(sx + 32 * wn + 8 * j + 2 * t);
        const float s0 = sw * sx01.x, s1 = sw * sx01.y;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          q[i][j][0] = fmaf(blk[i][j][0], s0, q[i][j][0]);
          q[i][j][1] = fmaf(blk[i][j][1], s1, q[i][j][1]);
          q[i][j][2] = fmaf(blk[i][j][2], s0, q[i][j][2]);
          q[i][j][3] = fmaf(blk[i][j][3], s1, q[i][j][3]);
        }
      }
    }

    fold_pass(sums, q, pass);
  }

  // The stores, kept out of the K loop so that their addressing holds no registers there.
  for_each_sum<4, 4>(sums, [&](int i, int j, int c, const float& sum) {
    const int r = 32 * wn + 8 * j + 2 * t + (c & 1);
    const int64_t n = n0 + 64 * wm + 16 * i + g + (c >= 2 ? 8 : 0);
    if (r < x_rows && n < rows.n) store_float(rows.y, (x_row0 + r) * rows.ldy + n, sum);
  });
}

// ---- The WGMMA kernel (FP8 tensor cores; kWgmmaFp8) ----
//
// The staged kernel's CTA shape and shared-memory tiles (128 weight rows x 128 x rows, 128-byte
// rows with chunk c of row r at chunk c ^ (r % 8), which is the 128-byte swizzle WGMMA reads when
// a tile starts on a 1024-byte boundary), but the MMAs are warpgroup-wide and take the e4m3 codes
// as they are: warpgroup wg (of 2) computes weight rows 64 wg .. 64 wg + 63 against all 128 x
// rows with four wgmma.m64n128k32 per K block into a fresh accumulator, then adds it, times the
// block's scales, to the running fp32 sums. Every thread also issues the tiles' cp.async copies,
// kWgmmaStages blocks ahead. Not the default numerics: Hopper's FP8 MMA keeps fewer bits while it
// sums a block's products (against fp64, a relative error of 1.4e-4 on random GEMMs; on the tiny
// model cuBLASLt's agreement with the CPU), which is why it is Fp8Gemm::kWgmma's, an option.
// The accumulators (wgmma.cuh's layout): rows are weight rows, columns x rows.
constexpr int kWgmmaThreads = 256;
constexpr int kWgmmaStages = 4;
constexpr int kWgmmaStageBytes = 2 * kTileBytes + 1024;  // w, x, x scales (512 B, padded to 1 KiB)
constexpr int kWgmmaSharedBytes = kWgmmaStages * kWgmmaStageBytes + 1024;  // + room to align to 1 KiB

__global__ void __launch_bounds__(kWgmmaThreads, 1) fp8_wgmma_gemm_kernel(Fp8MmaGemmParams p) {
  pdl_wait();
  extern __shared__ uint8_t wgmma_smem_raw[];
  // The tiles must start on 1024-byte boundaries for the swizzle WGMMA applies to match ours.
  uint8_t* const smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(wgmma_smem_raw) + 1023) & ~uintptr_t{1023});
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, warp_in_group = warp % 4;
  const int g = lane / 4, t = lane % 4;

  BlockRows rows;
  if (!block_rows(p, kStagedXRows, kStagedWRows, rows)) return;
  const int kblocks = static_cast<int>(p.k / 128);
  const float* sw_row = rows.w_scale + (rows.n0 / 128) * rows.w_scale_ld;

  const StagedTileCopy<false> copy(p, rows, tid);
  const uint32_t smem0 = shared_address(smem);
  auto load_stage = [&](int b) { copy(smem0 + static_cast<uint32_t>((b % kWgmmaStages) * kWgmmaStageBytes), b); };

  float q[kWgmmaN128Accumulators];
#pragma unroll
  for (float& v : q) v = 0.0f;
  float blk[kWgmmaN128Accumulators];
#pragma unroll
  for (float& v : blk) v = 0.0f;

#pragma unroll
  for (int s = 0; s < kWgmmaStages - 1; ++s) {
    if (s < kblocks) load_stage(s);
    cp_async_commit();
  }
  for (int b = 0; b < kblocks; ++b) {
    cp_async_wait<kWgmmaStages - 2>();
    // The copies were generic-proxy writes; WGMMA reads through the async proxy.
    fence_async_proxy();
    __syncthreads();  // block b's stage is in; every warp is done with b - 1's, which the next load takes
    if (b + kWgmmaStages - 1 < kblocks) load_stage(b + kWgmmaStages - 1);
    cp_async_commit();

    const uint32_t stage = smem0 + static_cast<uint32_t>((b % kWgmmaStages) * kWgmmaStageBytes);
    const uint64_t desc_a = wgmma_descriptor(stage + static_cast<uint32_t>(wg * 64 * 128));
    const uint64_t desc_b = wgmma_descriptor(stage + kTileBytes);
    fence_accumulators(blk);
    wgmma_e4m3_block(blk, desc_a, desc_b);

    const float sw = __ldg(sw_row + b);
    add_scaled_block(q, blk,
                     reinterpret_cast<const float*>(smem + (b % kWgmmaStages) * kWgmmaStageBytes + 2 * kTileBytes), sw, t);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = 8 * j + 2 * t + (c & 1);  // x row of the tile
      const int64_t n = rows.n0 + 64 * wg + 16 * warp_in_group + g + (c >= 2 ? 8 : 0);
      if (r < rows.x_rows && n < rows.n) store_float(rows.y, (rows.x_row0 + r) * rows.ldy + n, q[4 * j + c]);
    }
}

// The routed experts' e2m1 GEMM with 8-row x tiles takes two 16-row weight tiles a block, which
// convert each x operand once for both and have twice the weight loads in flight a warp, where one
// tile a block would fill the GPU's 8 blocks an SM more than kE2M1WideMinWaves times (a batch-64
// step 54.6 -> 48.1 ms, batch 16 24.7 -> 22.1; session 17 in docs/PERF.md). Since the weights sit
// in K-block tiles (e2m1_layout.h) a batch of one's calls (1,536 blocks of one tile: 1.45 waves)
// take them too, in one wave: a batch-1 step -1.9% (session 35; with the rows' old layout they
// had lost 1.5%, session 17). Dense calls of 16- and 32-row x tiles take the same two tiles a
// block (fp8_mma_gemm below).
constexpr int kWideWeightTiles = 2;
constexpr int64_t kE2M1WideMinWaves = 1;

// x rows per block of the streamed kernel.
int32_t streamed_tile_rows(int64_t m) { return m <= 8 ? 8 : m <= 16 ? 16 : 32; }

// A dense streamed call's blocks of 4 warps are latency-bound at decode sizes (a batch of 64's
// calls kept DRAM 2-14% busy with 0.15-0.85 eligible warps a scheduler, docs/PERF.md session 15):
// its x tiles are halved (down to 8 rows) until it has two blocks an SM.
constexpr int64_t kDenseMinBlocksPerSm = 2;

// The dense auto rule's grid size (an estimate until measured: bench_fp8_gemm prints both
// kernels): a staged CTA runs on an SM of its own at ~1/132 of the kernel's full-GPU rate (hoped
// 350+ TFLOP/s), the streamed kernel spreads any prefill GEMM over the whole GPU at ~100 TFLOP/s,
// so the staged kernel wins from about 132 * 100 / 350 ~ 38 tiles of 128 x 128 on.
constexpr int64_t kStagedMinTiles = 40;

template <int NT, int Stages, bool kChained = false>
void launch_piped(dim3 grid, cudaStream_t stream, const Fp8MmaGemmParams& p) {
  constexpr int bytes = StreamStage<NT, Stages, kChained>::kBlockBytes;
  auto* const kernel = fp8_mma_gemm_piped_kernel<NT, Stages, kChained>;
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  launch_pdl(kernel, grid, kWarps * 32, bytes, stream, p);
}

// The streamed kernel's registers form for x tiles of tile_rows (8, 16 or 32) rows, with two
// weight tiles a block where `wide` (e2m1: 8-row tiles only; dense: 16- and 32-row tiles only).
template <bool kChained>
void launch_streamed(dim3 grid, int32_t tile_rows, bool e2m1, bool wide, cudaStream_t stream,
                     const Fp8MmaGemmParams& p) {
  const auto launch = [&](auto kernel) { launch_pdl(kernel, grid, kWarps * 32, 0, stream, p); };
  if (e2m1) {
    switch (tile_rows) {
      case 8:
        if (wide) launch(fp8_mma_gemm_kernel<1, true, kWideWeightTiles, kChained>);
        else launch(fp8_mma_gemm_kernel<1, true, 1, kChained>);
        break;
      case 16: launch(fp8_mma_gemm_kernel<2, true, 1, kChained>); break;
      default: launch(fp8_mma_gemm_kernel<4, true, 1, kChained>); break;
    }
    return;
  }
  switch (tile_rows) {
    case 8: launch(fp8_mma_gemm_kernel<1, false, 1, kChained>); break;
    case 16:
      if (wide) launch(fp8_mma_gemm_kernel<2, false, kWideWeightTiles, kChained>);
      else launch(fp8_mma_gemm_kernel<2, false, 1, kChained>);
      break;
    default:
      if (wide) launch(fp8_mma_gemm_kernel<4, false, kWideWeightTiles, kChained>);
      else launch(fp8_mma_gemm_kernel<4, false, 1, kChained>);
      break;
  }
}

void check_grid_rows(int64_t tiles) {
  if (tiles > 65535)
    throw UsageError("fp8_mma_gemm: " + std::to_string(tiles) + " row tiles, at most 65535 (split the call)");
}

}  // namespace

void e2m1_mma_order(const uint8_t* stored, uint8_t* out, int64_t bytes) {
  if (bytes % 16 != 0) throw UsageError("e2m1_mma_order: " + std::to_string(bytes) + " bytes, not whole groups of 16");
  for (int64_t at = 0; at < bytes; at += 16) {
    const auto input = [&](int i) { return static_cast<uint32_t>(stored[at + i / 2] >> (4 * (i % 2))) & 0xFu; };
    const auto placed = [](uint32_t code, const E2m1SlotBits& bits) {
      return (code & 7u) << bits.magnitude | (code >> 3) << bits.sign;
    };
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
      for (int slot = 0; slot < 4; ++slot) {
        const int first = 8 * w + 2 * slot;
        word |= placed(input(first), kE2m1Slots[slot]) | placed(input(first + 1), kE2m1Slots[slot]) << 16;
      }
      for (int byte = 0; byte < 4; ++byte) out[at + 4 * w + byte] = static_cast<uint8_t>(word >> (8 * byte));
    }
  }
}

E2m1DeviceWeight e2m1_device_layout(const uint8_t* stored, const uint8_t* shifts, int64_t n, int64_t k) {
  if (n < 0 || k <= 0 || k % 128 != 0)
    throw UsageError("e2m1_device_layout: a weight of " + std::to_string(n) + " x " + std::to_string(k) +
                     " inputs; the layout takes whole K blocks of 128");
  const int64_t rows = e2m1_layout_rows(n), blocks = k / 128;
  E2m1DeviceWeight out;
  out.codes.assign(static_cast<size_t>(rows * k / 2), 0);
  out.shifts.assign(static_cast<size_t>(rows * k / 32), 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t codes_at = e2m1_row_codes_at(r, k) + b * kE2m1BlockCodeStride;
      e2m1_mma_order(stored + r * (k / 2) + b * kE2m1RowCodeBytes, out.codes.data() + codes_at, kE2m1RowCodeBytes);
      const int64_t shifts_at = e2m1_row_shifts_at(r, k) + b * kE2m1BlockShiftStride;
      std::copy_n(shifts + r * (k / 32) + 4 * b, 4, out.shifts.begin() + shifts_at);
    }
  return out;
}

int32_t fp8_mma_tile_rows(int64_t m) {
  return m < kFp8MmaStagedMinRows ? streamed_tile_rows(m) : kFp8MmaStagedTileRows;
}

Fp8MmaKernel fp8_mma_gemm_choice(const Fp8MmaGemmParams& p) {
  const bool grouped = p.tiles != nullptr;
  if (grouped && (p.tile_rows < 1 || p.tile_rows > kFp8MmaStagedTileRows))
    throw UsageError("fp8_mma_gemm: tile_rows=" + std::to_string(p.tile_rows) + ", expected 8, 16, 32 or up to " +
                     std::to_string(kFp8MmaStagedTileRows));
  const bool streamable = !grouped || p.tile_rows == 8 || p.tile_rows == 16 || p.tile_rows == 32;
  const bool paired = p.second.n > 0;
  const bool forced_cta = p.kernel == Fp8MmaKernel::kStaged || p.kernel == Fp8MmaKernel::kStagedIntegerX ||
                          p.kernel == Fp8MmaKernel::kWgmmaFp8 || p.kernel == Fp8MmaKernel::kF16Wgmma ||
                          p.kernel == Fp8MmaKernel::kChainedBf16Wgmma;
  if (paired && ((grouped ? !streamable : p.m >= kFp8MmaStagedMinRows) || forced_cta))
    throw UsageError("fp8_mma_gemm: a second output takes the streamed kernel: dense under " +
                     std::to_string(kFp8MmaStagedMinRows) + " rows (m=" + std::to_string(p.m) +
                     ") or grouped tiles of 8, 16 or 32 rows (tile_rows=" + std::to_string(p.tile_rows) + ")");
  if (p.w_codes == Fp8MmaWeightCodes::kE2M1 &&
      (p.kernel == Fp8MmaKernel::kStagedIntegerX || p.kernel == Fp8MmaKernel::kWgmmaFp8))
    throw UsageError(std::string("fp8_mma_gemm: e2m1 weights take the streamed or the staged kernel, not ") +
                     fp8_mma_kernel_name(p.kernel) + " (it reads e4m3 weight tiles only)");
  switch (p.kernel) {
    case Fp8MmaKernel::kAuto:
      if (paired) return Fp8MmaKernel::kStreamed;
      if (grouped) return streamable ? Fp8MmaKernel::kStreamed : Fp8MmaKernel::kStaged;
      return p.m >= kFp8MmaStagedMinRows &&
                     (p.m + kStagedXRows - 1) / kStagedXRows * ((p.n + kStagedWRows - 1) / kStagedWRows) >=
                         kStagedMinTiles
                 ? Fp8MmaKernel::kStaged
                 : Fp8MmaKernel::kStreamed;
    case Fp8MmaKernel::kStreamed:
    case Fp8MmaKernel::kChainedStreamed:
      if (!streamable)
        throw UsageError("fp8_mma_gemm: the streamed kernel takes grouped tiles of 8, 16 or 32 rows, not " +
                         std::to_string(p.tile_rows));
      if (p.kernel == Fp8MmaKernel::kChainedStreamed &&
          (p.x16 == nullptr || reinterpret_cast<uintptr_t>(p.x16) % 16 != 0))
        throw UsageError("fp8_mma_gemm: the chained streamed kernel reads x16, which must be set and 16-byte aligned");
      return p.kernel;
    case Fp8MmaKernel::kStaged:
    case Fp8MmaKernel::kStagedIntegerX:
    case Fp8MmaKernel::kWgmmaFp8: return p.kernel;
    case Fp8MmaKernel::kF16Wgmma:
    case Fp8MmaKernel::kChainedBf16Wgmma:
      check_f16_wgmma_gemm(p);
      return p.kernel;
  }
  throw UsageError("fp8_mma_gemm: unknown kernel " + std::to_string(static_cast<int>(p.kernel)));
}

const char* fp8_mma_kernel_name(Fp8MmaKernel kernel) {
  switch (kernel) {
    case Fp8MmaKernel::kAuto: return "auto";
    case Fp8MmaKernel::kStreamed: return "streamed";
    case Fp8MmaKernel::kStaged: return "staged";
    case Fp8MmaKernel::kStagedIntegerX: return "staged-integer-x";
    case Fp8MmaKernel::kWgmmaFp8: return "wgmma-fp8";
    case Fp8MmaKernel::kF16Wgmma: return "f16-wgmma";
    case Fp8MmaKernel::kChainedBf16Wgmma: return "chained-bf16-wgmma";
    case Fp8MmaKernel::kChainedStreamed: return "chained-streamed";
  }
  return "unknown";
}

void fp8_mma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream) {
  if (p.k % 128 != 0) throw UsageError("fp8_mma_gemm: k=" + std::to_string(p.k) + " is not a multiple of 128");
  if (e2m1_layout_rows(std::max(p.n, p.second.n)) * (p.k / 32) > int64_t{UINT32_MAX})  // the streamed kernel's 32-bit units
    throw UsageError("fp8_mma_gemm: a weight of " + std::to_string(std::max(p.n, p.second.n)) + " x " +
                     std::to_string(p.k) + " is too large for one call (split its rows)");
  const bool grouped = p.tiles != nullptr;
  const Fp8MmaKernel kernel = fp8_mma_gemm_choice(p);
  if (kernel == Fp8MmaKernel::kF16Wgmma || kernel == Fp8MmaKernel::kChainedBf16Wgmma) {
    f16_wgmma_gemm(p, stream);
    return;
  }
  // kWgmmaFp8's dense calls whose alignments TMA takes run on the persistent TMA-fed form of this
  // kernel (the same instructions and additions, so the same bits; faster: docs/PERF.md session 43).
  if (kernel == Fp8MmaKernel::kWgmmaFp8 && fp8_wgmma_dense_takes(p)) {
    fp8_wgmma_dense_gemm(p, stream);
    return;
  }
  if (kernel != Fp8MmaKernel::kStreamed && kernel != Fp8MmaKernel::kChainedStreamed) {  // a CTA per 128 x 128 outputs
    const int64_t tiles = grouped ? p.max_tiles : (p.m + kStagedXRows - 1) / kStagedXRows;
    if (p.n == 0 || tiles == 0 || p.k == 0) return;
    check_grid_rows(tiles);
    const bool wgmma = kernel == Fp8MmaKernel::kWgmmaFp8;
    auto* const cta_kernel = wgmma                                     ? fp8_wgmma_gemm_kernel
                             : kernel == Fp8MmaKernel::kStagedIntegerX  ? fp8_mma_gemm_staged_kernel<true, false>
                             : p.w_codes == Fp8MmaWeightCodes::kE2M1    ? fp8_mma_gemm_staged_kernel<false, true>
                                                                        : fp8_mma_gemm_staged_kernel<false, false>;
    const int threads = wgmma ? kWgmmaThreads : kStagedThreads;
    const int shared_bytes = wgmma                                    ? kWgmmaSharedBytes
                             : p.w_codes == Fp8MmaWeightCodes::kE2M1 ? StagedLayout<true>::kSharedBytes
                                                                     : StagedLayout<false>::kSharedBytes;
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(cta_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
    const dim3 grid(static_cast<unsigned>((p.n + kStagedWRows - 1) / kStagedWRows), static_cast<unsigned>(tiles));
    launch_pdl(cta_kernel, grid, threads, shared_bytes, stream, p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const auto row_blocks_of = [&](int64_t w_rows) { return (p.n + w_rows - 1) / w_rows + (p.second.n + w_rows - 1) / w_rows; };
  int32_t tile_rows = grouped ? p.tile_rows : streamed_tile_rows(p.m);
  // A row's bits do not depend on its tile: fewer rows a tile where that fills the GPU.
  if (!grouped && tile_rows > 8) {
    const int64_t min_blocks = kDenseMinBlocksPerSm * current_device_sm_count();
    while (tile_rows > 8 && row_blocks_of(kRowsPerBlock) * ((p.m + tile_rows - 1) / tile_rows) < min_blocks) tile_rows /= 2;
  }
  const int64_t tiles = grouped ? p.max_tiles : (p.m + tile_rows - 1) / tile_rows;
  const bool e2m1 = p.w_codes == Fp8MmaWeightCodes::kE2M1;
  const bool e2m1_wide = e2m1 && tile_rows == 8 &&
                         row_blocks_of(kRowsPerBlock) * tiles > kE2M1WideMinWaves * 8 * current_device_sm_count();
  // Dense calls with x tiles of 16 or 32 rows (decode batches of 9 to 63 rows) take two weight
  // tiles a block too: each x operand, whose conversions are one to two times the weight's at
  // those tiles, converted once for both (a batch-64 step -0.46%, batch 16 unchanged: PERF.md
  // session 31); each output's MMAs and sums are the one-tile block's, so the same bits.
  const bool dense_wide = !e2m1 && !grouped && tile_rows >= 16;
  const bool wide = e2m1_wide || dense_wide;
  const int64_t row_blocks = row_blocks_of(kRowsPerBlock * (wide ? kWideWeightTiles : 1));
  if (row_blocks == 0 || tiles == 0 || p.k == 0) return;
  check_grid_rows(tiles);
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(tiles));
  // The piped kernel where it measured faster: dense calls of up to 8 rows and K of 16+ blocks (a
  // warp's four or more blocks fill 4 or 8 stages). Not for 16- and 32-row tiles: alone it took a batch-64
  // step's dense calls from 4.7 to 3.7 ms, but beside the routed experts' GEMM (the shared
  // expert's side stream) its 67-100 KB blocks slowed the step by 7 ms (docs/PERF.md, session 15).
  const int64_t kblocks = p.k / 128;
  // kChainedStreamed's stages hold x's bf16 values, twice the default's bytes: six stages where the
  // default has eight keep two blocks an SM.
  const bool chained = kernel == Fp8MmaKernel::kChainedStreamed;
  const bool piped = !e2m1 && !grouped && p.m <= 8 && kblocks >= 16;  // e2m1: registers only, the stages hold e4m3 rows
  if (piped && kblocks >= 32) {
    if (chained) launch_piped<1, 6, true>(grid, stream, p);
    else launch_piped<1, 8>(grid, stream, p);
  } else if (piped) {
    if (chained) launch_piped<1, 4, true>(grid, stream, p);
    else launch_piped<1, 4>(grid, stream, p);
  } else if (chained) {
    launch_streamed<true>(grid, tile_rows, e2m1, wide, stream, p);
  } else {
    launch_streamed<false>(grid, tile_rows, e2m1, wide, stream, p);
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
