// Activation quantisation for the FP8 block-scaled GEMM: bf16 rows -> e4m3 codes with one
// power-of-two fp32 scale per 1x128 block (MODEL.md §14), written in the layout cuBLASLt's
// VEC128_32F scale mode expects.
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
};

void act_quant_fp8(const ActQuantParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
