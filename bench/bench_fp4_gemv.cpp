// MXFP4 experts at decode: weights kept as FP4 and read by kernels::fp4_gemv or by
// kernels::fp8_mma_gemm's streamed kernel (Fp8MmaWeightCodes::kE2M1, the FP8 cast's bits), or cast
// losslessly to FP8 at load and run through fp8_mma_gemm (the default) or cuBLASLt's block-scaled
// GEMM. Times each (with its activation quantisation) at V4-Flash's expert shapes beside its
// weight-read floor (bytes / 4.28 TB/s). Usage: bench_fp4_gemv [iterations]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/fp8_gemm.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/fp4_gemv.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "cuda_timing.h"

namespace {

constexpr double kMemoryBandwidth = 4.28e12;  // bytes/s, measured device-to-device copy (ENV.md)

struct Case {
  const char* name;
  int64_t n, k;
};

template <typename T>
T* device_bytes(int64_t bytes, int fill) {
  void* p = nullptr;
  DSV4_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
  DSV4_CUDA_CHECK(cudaMemset(p, fill, static_cast<size_t>(bytes)));
  return static_cast<T*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  if (!cuda::device_available()) {
    std::fprintf(stderr, "bench_fp4_gemv: no CUDA device\n");
    return 1;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 200;
  const Case cases[] = {{"expert w1/w3", 2048, 4096}, {"expert w2", 4096, 2048}};
  const int64_t rows[] = {1, 2, 4, 8};
  std::printf("%-14s %4s %12s %12s %12s %12s %12s %12s\n", "linear", "M", "fp4 gemv us", "mma e2m1 us", "fp4 floor",
              "fp8 cublas us", "mma fp8 us", "fp8 floor");
  cuda::Fp8BlockGemm gemm;
  for (const Case& c : cases) {
    const int64_t mp = cuda::fp8_gemm_padded_m(1), kb = c.k / 128, nb = (c.n + 127) / 128, kbp = (kb + 3) / 4 * 4;
    auto* x = device_bytes<uint16_t>(kernels::kFp4GemvMaxRows * c.k * 2, 0x3c);
    auto* xq = device_bytes<uint8_t>(mp * c.k, 0);
    auto* xs = device_bytes<float>(mp * kb * 4, 0);
    auto* w4 = device_bytes<uint8_t>(c.n * c.k / 2, 0x35);
    auto* w4s = device_bytes<uint8_t>(c.n * c.k / 32, 0x7f);
    auto* w8 = device_bytes<uint8_t>(c.n * c.k, 0x38);
    auto* w8s = device_bytes<float>(nb * kbp * 4, 0);
    const std::vector<float> ones(static_cast<size_t>(nb * kbp), 1.0f);
    DSV4_CUDA_CHECK(cudaMemcpy(w8s, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    auto* out = device_bytes<uint16_t>(mp * c.n * 2, 0);
    auto* shifts = device_bytes<uint8_t>(c.n * c.k / 32, 0);
    // fp8_mma_gemm on the FP8 codes or (e2m1) on the FP4 pairs as stored, m rows into bf16 out.
    const auto mma = [&](int64_t m, bool e2m1) {
      kernels::Fp8MmaGemmParams g;
      g.x = xq;
      g.x_scale = xs;
      g.x_scale_ld = mp;
      g.w_codes = e2m1 ? kernels::Fp8MmaWeightCodes::kE2M1 : kernels::Fp8MmaWeightCodes::kE4M3;
      g.w = e2m1 ? w4 : w8;
      g.w_shift = e2m1 ? shifts : nullptr;
      g.w_scale = w8s;
      g.w_scale_ld = kbp;
      g.y = {out, true};
      g.ldy = c.n;
      g.m = m;
      g.n = c.n;
      g.k = c.k;
      kernels::act_quant_fp8({x, xq, xs, m, mp, c.k}, nullptr);
      kernels::fp8_mma_gemm(g, nullptr);
    };
    const double fp4_bytes = static_cast<double>(c.n * c.k / 2 + c.n * c.k / 32), fp8_bytes = static_cast<double>(c.n * c.k);
    for (const int64_t m : rows) {
      const double fp4 = bench::time_us(
          [&] {
            kernels::act_quant_fp8({x, xq, xs, m, mp, c.k}, nullptr);
            kernels::fp4_gemv({xq, xs, w4, w4s, out, m, mp, c.n, c.k}, nullptr);
          },
          iters);
      const double fp8 = bench::time_us(
          [&] {
            kernels::act_quant_fp8({x, xq, xs, m, mp, c.k}, nullptr);
            gemm.run({xq, xs, w8, w8s, out, mp, c.n, c.k}, nullptr);
          },
          iters);
      const double mma_e2m1 = bench::time_us([&] { mma(m, true); }, iters);
      const double mma_fp8 = bench::time_us([&] { mma(m, false); }, iters);
      std::printf("%-14s %4ld %12.2f %12.2f %12.2f %12.2f %12.2f %12.2f\n", c.name, static_cast<long>(m), fp4, mma_e2m1,
                  fp4_bytes / kMemoryBandwidth * 1e6, fp8, mma_fp8, fp8_bytes / kMemoryBandwidth * 1e6);
    }
    for (void* p : {static_cast<void*>(x), static_cast<void*>(xq), static_cast<void*>(xs), static_cast<void*>(w4),
                    static_cast<void*>(w4s), static_cast<void*>(w8), static_cast<void*>(w8s), static_cast<void*>(out),
                    static_cast<void*>(shifts)})
      cudaFree(p);
  }
  return 0;
}
