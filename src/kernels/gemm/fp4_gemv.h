// An MXFP4 linear for decode-sized batches that reads the experts' weights as stored (e2m1 pairs
// with one e8m0 scale per 32 inputs), half the bytes of the lossless FP8 cast that the cuBLASLt
// path needs. Activations come quantised by act_quant_fp8 (e4m3 with a pow2 scale per 1x128), so
// the products are those of the FP8 path; sums are fp32 in a fixed order per output.
// Not yet used by CudaOps: bench_fp4_gemv measures it against the FP8 cast path at decode, as the
// GPU issue asks, before either is chosen.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::kernels {

inline constexpr int64_t kFp4GemvMaxRows = 8;

struct Fp4GemvParams {
  const uint8_t* x = nullptr;        // [m_padded, k] e4m3 codes (act_quant_fp8)
  const float* x_scale = nullptr;    // [k/128, m_padded] pow2 scales (act_quant_fp8's layout)
  const uint8_t* w = nullptr;        // [n, k/2] e2m1 pairs, the even input in the low nibble
  const uint8_t* w_scale = nullptr;  // [n, k/32] e8m0
  uint16_t* out = nullptr;           // [m, n] bf16
  int64_t m = 0;                     // 1..kFp4GemvMaxRows
  int64_t m_padded = 0;
  int64_t n = 0;
  int64_t k = 0;                     // a multiple of 1024 (one pass of a warp's 16-byte loads)
};

// Throws UsageError for shapes outside the limits above.
void fp4_gemv(const Fp4GemvParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
