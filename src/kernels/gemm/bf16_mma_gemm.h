// The bf16 linears of the default numerics (bf16 activations times bf16 weights: the compressors'
// wkv/wgate, the indexer's weights_proj, the MoE gate, the head) on bf16 tensor cores with fp32
// sums: y = x @ w^T. bf16 products are exact in fp32, so only the order of the sums differs from
// kernels::simple_gemm (CUDA cores, the CPU's order), which stays for exact-math forwards.
//
// Summation order (the same for every m and tile, so a row's result depends on that row alone and
// chunked, batched and one-at-a-time runs agree bit for bit): for output (row m, column n), K
// block b (128 wide) gives blk_b = the tensor cores' fp32 sum of its 128 products, taken as eight
// 16-deep MMAs in a fixed order from zero; the four lanes q_j (j = b mod 4) each accumulate
// q_j = q_j + blk_b over their blocks ascending; y = ((q_0 + q_1) + q_2) + q_3, rounded to y's
// type. (kernels/gemm/fp8_mma_gemm's order, with no scales.) Two kernels keep it: the streamed one
// (decode) and the staged one (prefill), as in fp8_mma_gemm.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

// A linear's weight and result: y = x @ w^T.
struct Bf16MmaOutput {
  const uint16_t* w = nullptr;  // [n, k] bf16, row stride k (16-byte aligned)
  MutFloatPtr y;                // [m, n] row stride ldy
  int64_t ldy = 0;
  int64_t n = 0;
};

enum class Bf16MmaKernel : uint8_t {
  kAuto,      // see bf16_mma_gemm_choice
  kStreamed,  // 16 weight rows x 8/16/32 x rows per block, operands straight into registers: decode
  kStaged,    // 128 weight rows x 128 x rows per CTA, halves of K blocks staged in shared memory: prefill
};

struct Bf16MmaGemmParams {
  const uint16_t* x = nullptr;  // [m, k] bf16, row stride ldx (a multiple of 8)
  int64_t ldx = 0;
  const uint16_t* w = nullptr;  // [n, k] bf16, row stride k
  MutFloatPtr y;                // [m, n] row stride ldy
  int64_t ldy = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;                // a multiple of 128
  // A second linear of the same x in the same launch (n > 0; the streamed kernel): its rows get the
  // bits they get alone.
  Bf16MmaOutput second;
  Bf16MmaKernel kernel = Bf16MmaKernel::kAuto;
};

// The kernel bf16_mma_gemm runs for p: kAuto takes the staged kernel from 64 rows when its grid has
// at least 40 tiles of 128 x 128 and there is no second output, else the streamed one (the same
// bits either way). A second output with a forced kStaged throws UsageError.
Bf16MmaKernel bf16_mma_gemm_choice(const Bf16MmaGemmParams& p);

// Whether the kernel takes these operands: k a multiple of 128, ldx a multiple of 8 and the
// pointers (x, w and a second output's w) 16-byte aligned (the caller falls back to kernels::simple_gemm otherwise).
bool bf16_mma_gemm_supports(const Bf16MmaGemmParams& p);

// Throws UsageError for operands bf16_mma_gemm_supports refuses.
void bf16_mma_gemm(const Bf16MmaGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
