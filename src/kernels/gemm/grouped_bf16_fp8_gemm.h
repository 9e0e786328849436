// The attention's grouped output projection (wo_a, MODEL.md §3.7) in the default numerics: bf16
// activations times FP8 block-scaled weights on bf16 tensor cores with fp32 sums, as DeepSeek's
// own code computes it in bf16 (no FP8 quantisation of the activations):
//   y[t, g, :] = x[t, g, :] @ dequant(w[g])^T,  w viewed as [G, R, K] e4m3 codes with one pow2
//   scale per 128 x 128 block.
// e4m3 codes and bf16 values are exact in bf16, so each product is exact in fp32.
//
// Summation order (the same for every token count and tile, so a row's result depends on that row
// alone and chunked, batched and one-at-a-time runs agree bit for bit): for output (t, g, r), K
// block b (128 wide) gives blk_b = the tensor cores' fp32 sum of its 128 products, taken as eight
// 16-deep MMAs in a fixed order; the four lanes q_j (j = b mod 4) each accumulate
// q_j = fmaf(blk_b, sw[row / 128, b], q_j) over their blocks ascending; y = ((q_0 + q_1) + q_2) +
// q_3, rounded to y's type. (kernels/gemm/fp8_mma_gemm's order, with bf16 x in place of scaled
// FP8 codes.) Two kinds of kernel compute it, as in fp8_mma_gemm: one streams the weight into
// registers (up to 16 tokens), the other stages tiles of both operands in shared memory (more
// tokens, r a multiple of 64: 64 x 32 and 64 x 64 tiles for decode batches, 128 x 128 from 384
// tokens on), with the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

struct GroupedBf16Fp8GemmParams {
  const uint16_t* x = nullptr;      // [tokens, groups, k] bf16
  const uint8_t* w = nullptr;       // [groups * r, k] e4m3 codes
  const float* w_scale = nullptr;   // w_scale[(row / 128) * w_scale_ld + b], row of the [groups * r, k] weight
  int64_t w_scale_ld = 0;
  MutFloatPtr y;                    // [tokens, groups, r]
  int64_t tokens = 0;
  int64_t groups = 0;
  int64_t r = 0;                    // a multiple of 16
  int64_t k = 0;                    // a multiple of 128
};

// Whether the kernel takes a weight of r rows per group and k columns (the caller falls back to
// kernels::simple_gemm otherwise).
bool grouped_bf16_fp8_gemm_supports(int64_t r, int64_t k);

void grouped_bf16_fp8_gemm(const GroupedBf16Fp8GemmParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
