// The FP8 block-scaled GEMM of the default numerics, y = dequant(xq) @ dequant(w)^T, on the fp16
// tensor cores with fp32 accumulation: e4m3 codes convert to fp16 exactly, so each 128-wide K
// block's products are exact and summed in fp32 (Hopper's FP8 MMA, which cuBLASLt uses, keeps
// fewer bits in its accumulator; MODEL.md §15 shows how such differences grow into flipped
// choices). Two kernels compute it: the streamed one (decode) loads every operand straight from
// global memory into registers, so small batches are bound by the weight's bytes; the staged one
// (prefill) brings 128 x 128 tiles of both operands into shared memory first, so each byte
// crosses L2 once per 128 x 128 outputs instead of once per warp.
//
// Summation order (the same for every M, tile shape and grouping, so a row's result depends on
// that row alone and chunked, batched and one-at-a-time runs agree bit for bit): for output
// (token m, row n), K block b (128 wide) gives blk_b = the tensor cores' fp32 sum of its 128
// products, taken as eight 16-deep MMAs in a fixed order; the four lanes q_j (j = b mod 4) each
// accumulate q_j = fmaf(blk_b, sx[m,b] * sw[n/128,b], q_j) over their blocks ascending (the scale
// product is exact: both are powers of two); y = ((q_0 + q_1) + q_2) + q_3, rounded to y's type.
//
// Why the two kernels give the same bits. Both issue, for every output (x row m, weight row n)
// and K block b, the same eight mma.sync.m16n8k16.f32.f16.f16.f32 in the same order s = 0..7,
// starting from a zero accumulator, with the weight as A and x as B, and with the same K element
// in the same fragment slot: lane (g, t) converts bytes 32t + 4s .. 32t + 4s + 3 of its rows'
// block (e4m3 -> fp16 is exact) into fragment K positions 2t, 2t + 1, 2t + 8, 2t + 9 of step s.
// An output element of an MMA is a function of its A row, its B column and its C element only,
// and the placement matches too: weight row n is A row n % 16 in both (blocks start at multiples
// of 16 weight rows), x row r of a tile is B column (r - tile start) % 8 in both (n8 tiles start
// every 8 rows of a tile). The scale product sw * sx, the fmaf into lane b mod 4 in ascending b from
// +0.0f, the three fp32 additions in lane order (lanes with no blocks adding +0.0f) and the final
// store are the same operations on the same values. What differs is only where operands wait
// (registers vs shared memory), which warp computes which output, and the order in which
// different outputs, and the four lanes of one output, are worked on: the staged kernel runs the
// lanes one after another (blocks 0, 4, 8, ..; 1, 5, ..; ..) keeping the running sum in shared
// memory, the streamed one runs them on four warps at once, fed with blk_b through shared memory
// by eight warps' MMAs. kStagedIntegerX converts x's codes with integer operations and an exact
// fp16 multiply instead of cvt: the same fp16 values for every code (checked for all pairs on the
// CPU), and for the NaN codes an fp16 NaN of another payload, which the MMA's and fmaf's NaN results do not carry. The tests check bit equality on
// many shapes, dense and grouped, NaN codes included. kE2M1 weights (below): the staged kernel
// converts each K block's weight rows into the cast's e4m3 codes in shared memory and reads those
// as it reads e4m3 weights, so it computes exactly what it computes on the cast; the streamed
// kernel's lane (g, t) turns the 16 bytes of its rows' block at 16t (the same 32 inputs) into the
// cast's fp16 values times 2^-14 in the same fragment slots, step s from word s / 2, and the block
// scale takes the 2^14 back, so that every product and sum is the cast's times a power of two.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

// One tile of a grouped GEMM: rows [row_begin, row_begin + rows) of x and y, all of one group
// (an expert), whose weight is group_w[group].
struct Fp8MmaTile {
  int32_t group = 0;
  int32_t row_begin = 0;
  int32_t rows = 0;  // 1 .. tile_rows
};

enum class Fp8MmaKernel : uint8_t {
  kAuto,      // see fp8_mma_gemm_choice
  kStreamed,  // 16 (e2m1 on a full GPU, dense 16/32-row x tiles: 32) weight rows x 8/16/32 x rows per block, operands into registers or a per-warp pipeline: decode
  kStaged,    // 128 weight rows x 128 x rows per CTA, tiles staged in shared memory: prefill
  // kStaged with the x fragments' e4m3 -> fp16 conversions on integer operations and an fp16
  // multiply instead of the conversion unit, which may bound kStaged; the same bits. Only when
  // asked for, until bench_fp8_gemm shows which of the two is faster on the H200.
  kStagedIntegerX,
  // Hopper's FP8 tensor cores through WGMMA (m64n128k32 e4m3, operands from the staged kernel's
  // shared-memory tiles): each 128-wide K block's four MMAs sum into a fresh fp32 accumulator,
  // which is then scaled and added in fp32 in ascending block order (one lane, not four). The FP8
  // MMA keeps fewer bits inside a block than the fp16 one, so these are not the other kernels'
  // bits; dense or grouped with tiles of up to 128 rows, no second output. Dense calls that
  // fp8_wgmma_dense_takes (f16_wgmma_gemm.h: x's scales TMA can read) run on the TMA-fed,
  // persistent form of the same MMAs and additions, with the same bits. Only when asked for
  // (the CUDA backend's Fp8Gemm::kWgmma, `--fp8-gemm wgmma`).
  kWgmmaFp8,
  // The staged kernel's bits from Hopper's fp16 tensor cores through WGMMA, on operands converted
  // beforehand (e4m3_to_f16_mma_order: x and the weight as fp16 in the MMA steps' K order), which
  // TMA brings into shared memory while the two warpgroups only multiply (f16_wgmma_gemm.cu).
  // Dense e4m3 weights (the caller converts them and sets w16) or grouped e2m1 weights in tiles of
  // up to 128 rows (the kernel's consumers convert them into their MMAs' A registers); x16 set, no
  // second output; only when asked for.
  kF16Wgmma,
  // The chained order (new bits, not the other kernels'): kF16Wgmma's calls on its kernels with
  // bf16 WGMMAs, x16 holding x's bf16 values with their scales folded in (act_quant_fp8's
  // q16_bf16_scaled; x_scale unread) and, dense, w16 the weight's with its block scales folded in
  // (e4m3_to_bf16_scaled_mma_order, f16_wgmma_gemm.h; w_scale unread). For output (token m,
  // row n): every operand is exact in bf16 (x's e4m3 code x its power-of-two scale, the weight's
  // e2m1 x 2^shift x block scale), lane q_j (j = 0..3) is one tensor-core accumulation, from zero,
  // over the k16 steps of blocks b = j, j + 4, .. in ascending order (each block's steps in the
  // order the other kernels take them), and y = ((q_0 + q_1) + q_2) + q_3: every product exact and
  // every sum fp32, as in the order above, without a per-block sum and its promotion (the fmaf
  // that kF16Wgmma's consumers cannot overlap with their MMAs). A row's bits depend on that row
  // alone, as above. Only when asked for (the CUDA backend's Fp8Gemm::kChained).
  kChainedBf16Wgmma,
  // The chained order on the streamed kernel (decode sizes, second output allowed, the same tiles,
  // weights and registers or piped form as kStreamed): the chained WGMMA kernels' bits from
  // mma.sync, whose k16 step sums into a running fp32 accumulator as WGMMA's does. x16 holds x's
  // bf16 values with their scales folded in, in x's own K order (act_quant_fp8's
  // q16_bf16_scaled with q16_natural_order: the lane that feeds inputs 32 t .. 32 t + 31 of a
  // block reads them as they lie); the weight's codes, shifts and block scales as kStreamed reads
  // them, x_scale unread. Only when asked for (the CUDA backend's Fp8Gemm::kChained below the
  // sizes that take kChainedBf16Wgmma).
  kChainedStreamed,
};

// The x rows of one staged CTA (the most a grouped tile for it may hold), and the smallest batch
// for which fp8_mma_tile_rows picks it.
constexpr int32_t kFp8MmaStagedTileRows = 128;
constexpr int64_t kFp8MmaStagedMinRows = 64;

// How the weight's values are stored. kE2M1: an MXFP4 weight's e2m1 codes and per-32-input shifts
// in e2m1_device_layout's layout, with the 128x128 block scales of its lossless FP8 cast (loader/weights.h, mxfp4_block_shifts). The
// streamed kernel's lane (g, t) turns its 32 inputs of a block into fp16 as e2m1 x 2^shift x 2^-14
// (one or two shifts and masks a pair and one exact multiply; the block scale takes the 2^14 back,
// exactly), so the MMAs see the cast's operands scaled by a power of two; the staged kernel
// converts each K block of its 128 weight rows once into the cast's e4m3 codes in shared memory
// (byte permutes) and multiplies those (e2m1_layout.h has both conversions). Both give the cast's
// bits from half its bytes. fp8_mma_gemm_choice refuses kStagedIntegerX and kWgmmaFp8, which read
// e4m3 weights only.
enum class Fp8MmaWeightCodes : uint8_t { kE4M3, kE2M1 };

// The checkpoint's packed e2m1 pairs (byte j of a row: inputs 2j in the low nibble, 2j + 1 in the
// high) re-laid, 16 bytes (one 32-input group) at a time, in the order the streamed kernel reads
// them: word w of a group holds its inputs 8w .. 8w + 7, a pair per slot s = 0..3 (inputs 8w + 2s
// and 8w + 2s + 1, one fp16x2 operand of an MMA step) at the bits e2m1_layout.h's kE2m1Slots give.
// Host code, once at load; `stored` and `out` hold the same (multiple of 16) number of bytes.
void e2m1_mma_order(const uint8_t* stored, uint8_t* out, int64_t bytes);

// An MXFP4 weight [n, k] as the kernels read it (e2m1_layout.h: K-block tiles of 16 rows): the
// checkpoint's packed pairs [n, k/2] and the cast's shifts [n, k/32] (mxfp4_block_shifts) into
// e2m1_layout_rows(n) x k/2 code bytes in e2m1_mma_order's order and as many rows x k/32 shift
// bytes, the padding rows zero. k a multiple of 128 (UsageError otherwise). Host code, once at load.
struct E2m1DeviceWeight {
  std::vector<uint8_t> codes, shifts;
};
E2m1DeviceWeight e2m1_device_layout(const uint8_t* stored, const uint8_t* shifts, int64_t n, int64_t k);

// A linear's weight and result: y = x @ dequant(w)^T.
struct Fp8MmaOutput {
  const uint8_t* w = nullptr;       // [n, k] e4m3 codes, or e2m1 codes in e2m1_device_layout's layout (dense)
  const uint8_t* w_shift = nullptr; // kE2M1: shifts in e2m1_device_layout's layout (dense; 4-byte aligned)
  const float* w_scale = nullptr;   // w_scale[(row / 128) * w_scale_ld + b] (dense)
  int64_t w_scale_ld = 0;
  MutFloatPtr y;                    // [m, n] row stride ldy
  int64_t ldy = 0;
  int64_t n = 0;
  int32_t group_offset = 0;         // grouped: a tile of group g meets group_w[g + group_offset]
};

struct Fp8MmaGemmParams {
  const uint8_t* x = nullptr;       // [m, k] e4m3 codes, row stride k (act_quant_fp8's q)
  const float* x_scale = nullptr;   // x_scale[b * x_scale_ld + row]: block b's pow2 scale of that row
  int64_t x_scale_ld = 0;           // >= m (act_quant_fp8's m_padded)
  Fp8MmaWeightCodes w_codes = Fp8MmaWeightCodes::kE4M3;  // of every weight of the call
  const uint8_t* w = nullptr;       // [n, k] e4m3 codes or e2m1_device_layout's codes (dense; unused when grouped)
  const uint8_t* w_shift = nullptr; // kE2M1: e2m1_device_layout's shifts (dense; 4-byte aligned: the staged kernel copies words)
  const float* w_scale = nullptr;   // w_scale[(row / 128) * w_scale_ld + b] (fp8_weight_scales_for_cublaslt)
  int64_t w_scale_ld = 0;
  MutFloatPtr y;                    // [m, n] row stride ldy
  int64_t ldy = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;                    // a multiple of 128
  // Grouped mode (tiles != nullptr): the grid runs max_tiles tiles, of which the first
  // *tile_count (device memory) are real; tile t covers tiles[t]. Each group's weight and scales
  // come from group_w / group_w_scale (device arrays of device pointers), all [n, k].
  const Fp8MmaTile* tiles = nullptr;
  const int32_t* tile_count = nullptr;
  int64_t max_tiles = 0;
  int32_t tile_rows = 0;            // the most rows a tile may hold: 8, 16, 32 (streamed) or up to 128 (staged)
  const uint8_t* const* group_w = nullptr;
  const float* const* group_w_scale = nullptr;
  const uint8_t* const* group_w_shift = nullptr;  // kE2M1 (each 4-byte aligned)
  Fp8MmaKernel kernel = Fp8MmaKernel::kAuto;
  // kF16Wgmma: x's and (dense) the weight's codes as e4m3_to_f16_mma_order writes them ([m, k] and
  // [n, k] fp16, 16-byte aligned); x_scale_ld a multiple of 4 and x_scale 16-byte aligned (TMA's rules).
  const uint16_t* x16 = nullptr;
  const uint16_t* w16 = nullptr;
  // A second linear of the same x in the same launch (n > 0; the streamed kernel: dense with m <
  // kFp8MmaStagedMinRows, or grouped with tiles of 8, 16 or 32 rows): its rows get the bits they
  // get alone.
  Fp8MmaOutput second;
};

// The rows a grouped GEMM's tile builder should give each tile for groups of about m rows:
// 8, 16 or 32 (the streamed kernel) below kFp8MmaStagedMinRows, else kFp8MmaStagedTileRows.
int32_t fp8_mma_tile_rows(int64_t m);

// The kernel fp8_mma_gemm runs for p. A second output takes the streamed kernel (UsageError for
// dense m >= kFp8MmaStagedMinRows, grouped tiles of other sizes, or a forced staged kernel). kAuto:
// grouped, the staged kernel iff tile_rows is not
// 8, 16 or 32; dense, the staged kernel iff m >= kFp8MmaStagedMinRows and its grid has at least
// 40 tiles of 128 x 128 (estimated, fp8_mma_gemm.cu), else the streamed kernel. A forced
// kStreamed throws UsageError for grouped tiles of other than 8, 16 or 32 rows; a grouped
// tile_rows outside 1..128 always throws. kE2M1 weights follow the same rules; a forced
// kStagedIntegerX or kWgmmaFp8 throws UsageError for them. kAuto never picks kF16Wgmma; forced, it
// throws UsageError unless the call is dense of e4m3 weights with w16 set or grouped of e2m1
// weights, with no second output, with x16 set and the alignments it needs. The same for
// kChainedBf16Wgmma, which needs no x_scale. kChainedStreamed follows kStreamed's rules, needs
// x16 (16-byte aligned) and no x_scale.
Fp8MmaKernel fp8_mma_gemm_choice(const Fp8MmaGemmParams& p);

const char* fp8_mma_kernel_name(Fp8MmaKernel kernel);

// kF16Wgmma's operands: `rows` rows of k e4m3 codes (k a multiple of 128) as fp16 values (exact),
// each 128-wide K block re-laid so that MMA step s (16 K positions, 16 s .. 16 s + 15) holds what
// the other kernels' step s holds in the same K positions: code 32 t + 4 s + i of a block (t =
// 0..3, i = 0..3) goes to position 16 s + 2 t + (i % 2) + 8 (i / 2). codes and out 16-byte aligned.
void e4m3_to_f16_mma_order(const uint8_t* codes, uint16_t* out, int64_t rows, int64_t k, cudaStream_t stream);

// A dense streamed GEMM starts loading its weight before it waits for the kernel launched before
// it (programmatic dependent launch), so that kernel must not write the weight; weights are
// written by uploads and loaders long before any GEMM reads them.
void fp8_mma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
