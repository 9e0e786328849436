// Times the GPU FP8 block-scaled linear (activation quantisation + the GEMM) at V4-Flash shapes,
// with cuBLASLt's FP8 GEMM and with kernels::fp8_mma_gemm (the default), and prints time, TFLOP/s
// and weight GB/s beside the H200's memory floor (4.28 TB/s).
// Usage: bench_fp8_gemm [iterations]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/fp8_gemm.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "cuda_timing.h"

namespace {

struct Case {
  const char* name;
  int64_t n, k;
};

constexpr double kMemoryBandwidth = 4.28e12;  // bytes/s, measured device-to-device copy (ENV.md)

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  if (!cuda::device_available()) {
    std::fprintf(stderr, "bench_fp8_gemm: no CUDA device\n");
    return 1;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 50;
  const Case cases[] = {{"wq_a+wkv (fused)", 1536, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192},
                        {"shared w1", 2048, 4096}, {"N=4096 K=7168", 4096, 7168}};
  const int64_t ms[] = {1, 16, 64, 512, 4096};
  std::printf("%-18s %6s %12s %10s %10s %10s %10s %12s\n", "gemm", "M", "cuBLASLt us", "TFLOP/s", "mma us",
              "TFLOP/s", "GB/s", "floor us");
  cuda::Fp8BlockGemm gemm;
  for (const Case& c : cases) {
    for (int64_t m : ms) {
      const int64_t mp = cuda::fp8_gemm_padded_m(m);
      uint16_t *x, *out;
      uint8_t *xq, *w;
      float *xs, *ws;
      const int64_t kb = c.k / 128, nb = (c.n + 127) / 128, kbp = (kb + 3) / 4 * 4;
      DSV4_CUDA_CHECK(cudaMalloc(&x, m * c.k * 2));
      DSV4_CUDA_CHECK(cudaMalloc(&xq, mp * c.k));
      DSV4_CUDA_CHECK(cudaMalloc(&xs, mp * kb * 4));
      DSV4_CUDA_CHECK(cudaMalloc(&w, c.n * c.k));
      DSV4_CUDA_CHECK(cudaMalloc(&ws, nb * kbp * 4));
      DSV4_CUDA_CHECK(cudaMalloc(&out, mp * c.n * 2));
      DSV4_CUDA_CHECK(cudaMemset(x, 0x3c, m * c.k * 2));
      DSV4_CUDA_CHECK(cudaMemset(w, 0x38, c.n * c.k));
      const std::vector<float> ones(static_cast<size_t>(nb * kbp), 1.0f);
      DSV4_CUDA_CHECK(cudaMemcpy(ws, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
      auto step = [&] {
        kernels::act_quant_fp8({x, xq, xs, m, mp, c.k}, nullptr);
        gemm.run({xq, xs, w, ws, out, mp, c.n, c.k}, nullptr);
      };
      auto mma_step = [&] {
        kernels::act_quant_fp8({x, xq, xs, m, m, c.k}, nullptr);
        kernels::Fp8MmaGemmParams p;
        p.x = xq;
        p.x_scale = xs;
        p.x_scale_ld = m;
        p.w = w;
        p.w_scale = ws;
        p.w_scale_ld = kbp;
        p.y = {out, true};
        p.ldy = c.n;
        p.m = m;
        p.n = c.n;
        p.k = c.k;
        kernels::fp8_mma_gemm(p, nullptr);
      };
      const double us = bench::time_us(step, iters), mma_us = bench::time_us(mma_step, iters);
      const double flops = 2.0 * m * c.n * c.k;
      const double weight_bytes = static_cast<double>(c.n) * c.k;
      std::printf("%-18s %6ld %12.2f %10.1f %10.2f %10.1f %10.0f %12.2f\n", c.name, static_cast<long>(m), us,
                  flops / us * 1e-6, mma_us, flops / mma_us * 1e-6, weight_bytes / mma_us * 1e-3,
                  weight_bytes / kMemoryBandwidth * 1e6);
      cudaFree(x);
      cudaFree(xq);
      cudaFree(xs);
      cudaFree(w);
      cudaFree(ws);
      cudaFree(out);
    }
  }
  return 0;
}
