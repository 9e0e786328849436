// The FP8 block-scaled GEMM of the default numerics, y = dequant(xq) @ dequant(w)^T, on the fp16
// tensor cores with fp32 accumulation: e4m3 codes convert to fp16 exactly, so each 128-wide K
// block's products are exact and summed in fp32 (Hopper's FP8 MMA, which cuBLASLt uses, keeps
// fewer bits in its accumulator; MODEL.md §15 shows how such differences grow into flipped
// choices). Also the decode path: it streams the weight straight into registers, with no shared
// memory staging, so small batches are bound by the weight's bytes.
//
// Summation order (the same for every M, tile shape and grouping, so a row's result depends on
// that row alone and chunked, batched and one-at-a-time runs agree bit for bit): for output
// (token m, row n), K block b (128 wide) gives blk_b = the tensor cores' fp32 sum of its 128
// products, taken as eight 16-deep MMAs in a fixed order; the four lanes q_j (j = b mod 4) each
// accumulate q_j = fmaf(blk_b, sx[m,b] * sw[n/128,b], q_j) over their blocks ascending (the scale
// product is exact: both are powers of two); y = ((q_0 + q_1) + q_2) + q_3, rounded to y's type.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

// One tile of a grouped GEMM: rows [row_begin, row_begin + rows) of x and y, all of one group
// (an expert), whose weight is group_w[group].
struct Fp8MmaTile {
  int32_t group = 0;
  int32_t row_begin = 0;
  int32_t rows = 0;  // 1 .. tile_rows
};

struct Fp8MmaGemmParams {
  const uint8_t* x = nullptr;       // [m, k] e4m3 codes, row stride k (act_quant_fp8's q)
  const float* x_scale = nullptr;   // x_scale[b * x_scale_ld + row]: block b's pow2 scale of that row
  int64_t x_scale_ld = 0;           // >= m (act_quant_fp8's m_padded)
  const uint8_t* w = nullptr;       // [n, k] e4m3 codes (dense; unused when grouped)
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
  int32_t tile_rows = 0;            // the most rows a tile may hold: 8, 16 or 32
  const uint8_t* const* group_w = nullptr;
  const float* const* group_w_scale = nullptr;
};

// The x rows one tile takes for a dense GEMM of m rows (8, 16 or 32), also what a grouped GEMM's
// tile builder should use for groups of about m rows.
int32_t fp8_mma_tile_rows(int64_t m);

void fp8_mma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
