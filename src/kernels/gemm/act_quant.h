// Activation quantisation for the FP8 block-scaled GEMM: bf16 rows -> e4m3 codes with one
// power-of-two fp32 scale per 1x128 block (MODEL.md §14), written in the layout cuBLASLt's
// VEC128_32F scale mode expects. The rows may be gathered (row r from x row src_row[r]), go to
// several rows each (x row r to rows scatter_rows[r * fanout + j]) or be the MoE experts' SwiGLU
// of two projections, so that the experts' device path quantises its grouped inputs (at prefill
// sizes a token's row once for its k experts' rows) and its hidden rows without a kernel (and a
// buffer) of its own before each.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::kernels {

struct ActQuantParams {
  const uint16_t* x = nullptr;  // [m, k] bf16, row-major (row stride k)
  uint8_t* q = nullptr;         // [m_padded, k] e4m3; rows m..m_padded-1 are written as zeros
  float* scale = nullptr;       // [k/128, m_padded] fp32, K-block-major: scale[kb * m_padded + row]
  int64_t m = 0;                // real rows
  int64_t m_padded = 0;         // >= m; cuBLASLt wants a multiple of 4 and at least 16
  int64_t k = 0;                // multiple of 128
  const int32_t* src_row = nullptr;  // [m]: row r is x row src_row[r] (x then has the rows those name)
  // Set (without src_row): x has m / scatter_fanout rows, and x row r's codes and scale go to rows
  // scatter_rows[r * scatter_fanout + j] (j < scatter_fanout, at most 8; -1: nowhere) of q (q16)
  // and scale, each row r quantised once. Not with swiglu_up.
  const int32_t* scatter_rows = nullptr;
  int64_t scatter_fanout = 0;
  // Set: row r is kernels::swiglu's row r of gate x and up swiglu_up ([m, k] bf16 each) with
  // swiglu_row_weight (nullptr: 1) and swiglu_limit, rounded to bf16 as swiglu writes it.
  const uint16_t* swiglu_up = nullptr;
  const float* swiglu_row_weight = nullptr;
  float swiglu_limit = 0;
  // Set: the codes go here instead of q (which is then unused), as the fp16 values
  // e4m3_to_f16_mma_order would write ([m_padded, k] fp16 in fp8_mma_gemm.h's kF16Wgmma layout).
  uint16_t* q16 = nullptr;
  // With q16: bf16 values of each code times its block's scale (exact: e4m3's 4 significant bits
  // and a power of two), in the same layout, for fp8_mma_gemm's kChainedBf16Wgmma, instead of the
  // codes' fp16 values. The scales are written as ever.
  bool q16_bf16_scaled = false;
  // With q16_bf16_scaled: the values in x's own K order ([m_padded, k] bf16, value c of a row at
  // c), for fp8_mma_gemm's kChainedStreamed, instead of the MMA steps' order.
  bool q16_natural_order = false;
};

void act_quant_fp8(const ActQuantParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
