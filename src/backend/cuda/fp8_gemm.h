// FP8 linear with DeepSeek block scales through cuBLASLt: out[m, n] (bf16) = X[m, k] · W[n, k]^T
// with X quantised per 1x128 and W per 128x128, fp32 scales, fp32 accumulation. The scale
// layouts cuBLASLt 13 expects were measured on the H200 (ENV.md): weight scales row-major per
// 128-row block with the K-block count padded to a multiple of 4; activation scales
// K-block-major with stride m_padded.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace dsv4::cuda {

// M padding cuBLASLt needs for these scale modes: a multiple of 4 and at least 16.
int64_t fp8_gemm_padded_m(int64_t m);

// The checkpoint's e8m0 [ceil(n/128), ceil(k/128)] weight scales as cuBLASLt's fp32 layout
// [ceil(n/128), roundup(ceil(k/128), 4)] (host side; done once at load).
std::vector<float> fp8_weight_scales_for_cublaslt(const uint8_t* e8m0, int64_t n, int64_t k);

struct Fp8GemmParams {
  const uint8_t* x = nullptr;        // [m_padded, k] e4m3 (from kernels::act_quant_fp8)
  const float* x_scale = nullptr;    // [k/128, m_padded] fp32
  const uint8_t* w = nullptr;        // [n, k] e4m3, row-major
  const float* w_scale = nullptr;    // fp8_weight_scales_for_cublaslt layout
  uint16_t* out = nullptr;           // [m_padded, n] bf16, row-major
  int64_t m_padded = 0;
  int64_t n = 0;
  int64_t k = 0;                     // multiple of 128
};

// Owns the cuBLASLt handle and one plan (descriptors + chosen algorithm) per shape, made on first
// use so later calls only launch. Not thread-safe, but one host thread may run GEMMs on several
// streams at once (fork/join side streams): no device memory is shared between calls, each call
// takes the workspace its algorithm needs in stream order on its own stream (StreamBuffer, which
// also works under stream capture).
class Fp8BlockGemm {
 public:
  Fp8BlockGemm();
  ~Fp8BlockGemm();
  Fp8BlockGemm(const Fp8BlockGemm&) = delete;
  Fp8BlockGemm& operator=(const Fp8BlockGemm&) = delete;

  // Throws CudaError when cuBLASLt has no algorithm for the shape (it names the shape).
  void run(const Fp8GemmParams& p, cudaStream_t stream);

 private:
  struct Plan;
  const Plan& plan_for(const Fp8GemmParams& p);

  cublasLtHandle_t handle_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace dsv4::cuda
