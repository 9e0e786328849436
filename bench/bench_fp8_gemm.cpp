// Times the GPU FP8 block-scaled linear (activation quantisation + the GEMM) at V4-Flash shapes,
// with cuBLASLt's FP8 GEMM and with kernels::fp8_mma_gemm's kernels (streamed, staged, staged with
// integer x conversions, FP8 WGMMA on its TMA-fed and its cp.async kernel, f16 WGMMA and the
// chained order's streamed kernel, each forced; f16 WGMMA with and without its operands'
// conversions; plus which one a default linear runs), and prints time, TFLOP/s and weight GB/s
// (of the default) beside the H200's memory floor (4.28 TB/s).
// Usage: bench_fp8_gemm [iterations [gemm [rows]]]: gemm (a substring of a row's name, e.g. wq_b)
// and rows pick one row of the table, so that ncu can profile its launches alone.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/fp8_gemm.h"
#include "kernels/cuda_check.h"
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
  const std::string only_gemm = argc > 2 ? argv[2] : "";
  const int64_t only_rows = argc > 3 ? std::atoll(argv[3]) : 0;
  if (iters < 1 || (argc > 3 && only_rows < 1)) {
    std::fprintf(stderr, "usage: bench_fp8_gemm [iterations >= 1 [gemm name substring [rows >= 1]]]\n");
    return 2;
  }
  const Case cases[] = {{"wq_a+wkv (fused)", 1536, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192},
                        {"shared/expert w1", 2048, 4096}, {"shared/expert w2", 4096, 2048},
                        {"N=4096 K=7168", 4096, 7168}};
  const int64_t ms[] = {1, 16, 64, 512, 2048, 4096, 8192};
  std::printf("%-18s %6s %12s %8s %12s %8s %10s %8s %12s %8s %10s %8s %10s %8s %10s %8s %10s %8s %12s %8s %9s %10s\n",
              "gemm", "M", "cuBLASLt us", "TFLOP/s", "streamed us", "TFLOP/s", "staged us", "TFLOP/s", "staged-ix us",
              "TFLOP/s", "wgmma us", "TFLOP/s", "wgmma-cp us", "TFLOP/s", "f16w us", "TFLOP/s", "f16w+cv us", "TFLOP/s",
              "chained-s us", "default", "GB/s", "floor us");
  cuda::Fp8BlockGemm gemm;
  for (const Case& c : cases) {
    if (std::string(c.name).find(only_gemm) == std::string::npos) continue;
    for (int64_t m : ms) {
      if (only_rows > 0 && m != only_rows) continue;
      const int64_t mp = cuda::fp8_gemm_padded_m(m);
      uint16_t *x, *out;
      uint8_t *xq, *w;
      float *xs, *ws;
      const int64_t kb = c.k / 128, nb = (c.n + 127) / 128, kbp = (kb + 3) / 4 * 4;
      DSV4_CUDA_CHECK(cudaMalloc(&x, m * c.k * 2));
      // Rows as act_quant writes them: mp, or m + 1 for the cp.async FP8 WGMMA column.
      const int64_t rows = std::max(mp, m + 1);
      DSV4_CUDA_CHECK(cudaMalloc(&xq, rows * c.k));
      DSV4_CUDA_CHECK(cudaMalloc(&xs, rows * kb * 4));
      DSV4_CUDA_CHECK(cudaMalloc(&w, c.n * c.k));
      DSV4_CUDA_CHECK(cudaMalloc(&ws, nb * kbp * 4));
      DSV4_CUDA_CHECK(cudaMalloc(&out, mp * c.n * 2));
      uint16_t *x16, *w16;
      DSV4_CUDA_CHECK(cudaMalloc(&x16, mp * c.k * 2));
      DSV4_CUDA_CHECK(cudaMalloc(&w16, c.n * c.k * 2));
      DSV4_CUDA_CHECK(cudaMemset(x, 0x3c, m * c.k * 2));
      DSV4_CUDA_CHECK(cudaMemset(w, 0x38, c.n * c.k));
      const std::vector<float> ones(static_cast<size_t>(nb * kbp), 1.0f);
      DSV4_CUDA_CHECK(cudaMemcpy(ws, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
      auto step = [&] {
        kernels::act_quant_fp8({x, xq, xs, m, mp, c.k}, nullptr);
        gemm.run({xq, xs, w, ws, out, mp, c.n, c.k}, nullptr);
      };
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
      // x quantised with its scales' rows x_scale_ld apart, then the GEMM on `kernel`.
      auto mma_step = [&](kernels::Fp8MmaKernel kernel, int64_t x_scale_ld) {
        kernels::act_quant_fp8({x, xq, xs, m, x_scale_ld, c.k}, nullptr);
        p.x_scale_ld = x_scale_ld;
        p.kernel = kernel;
        kernels::fp8_mma_gemm(p, nullptr);
      };
      const double us = bench::time_us(step, iters);
      const double streamed_us = bench::time_us([&] { mma_step(kernels::Fp8MmaKernel::kStreamed, m); }, iters);
      const double staged_us = bench::time_us([&] { mma_step(kernels::Fp8MmaKernel::kStaged, m); }, iters);
      const double staged_ix_us = bench::time_us([&] { mma_step(kernels::Fp8MmaKernel::kStagedIntegerX, m); }, iters);
      // FP8 WGMMA: x's scales at a row stride of mp (a multiple of 4: the TMA-fed kernel) and of
      // m + 1 (the cp.async kernel, the same bits).
      const double wgmma_us = bench::time_us([&] { mma_step(kernels::Fp8MmaKernel::kWgmmaFp8, mp); }, iters);
      const double wgmma_cp_us = bench::time_us([&] { mma_step(kernels::Fp8MmaKernel::kWgmmaFp8, m + 1); }, iters);
      // f16 WGMMA: x's scales at a row stride of mp (a multiple of 4), the operands converted once
      // (f16w), or x quantised straight to fp16 and the weight converted every call (f16w+cv, what
      // a linear pays; like the other columns it includes the quantisation).
      kernels::act_quant_fp8({x, xq, xs, m, mp, c.k}, nullptr);
      kernels::e4m3_to_f16_mma_order(xq, x16, m, c.k, nullptr);
      kernels::e4m3_to_f16_mma_order(w, w16, c.n, c.k, nullptr);
      p.x_scale_ld = mp;
      p.x16 = x16;
      p.w16 = w16;
      p.kernel = kernels::Fp8MmaKernel::kF16Wgmma;
      const double f16_us = bench::time_us([&] { kernels::fp8_mma_gemm(p, nullptr); }, iters);
      kernels::ActQuantParams quant_f16{x, nullptr, xs, m, mp, c.k};
      quant_f16.q16 = x16;
      const double f16_converting_us = bench::time_us(
          [&] {
            kernels::act_quant_fp8(quant_f16, nullptr);
            kernels::e4m3_to_f16_mma_order(w, w16, c.n, c.k, nullptr);
            kernels::fp8_mma_gemm(p, nullptr);
          },
          iters);
      // The chained order on the streamed kernel: x quantised straight to its scaled bf16 values in
      // its own K order, then the GEMM (kChainedStreamed, registers form).
      kernels::ActQuantParams quant_chained{x, nullptr, xs, m, mp, c.k};
      quant_chained.q16 = x16;
      quant_chained.q16_bf16_scaled = quant_chained.q16_natural_order = true;
      p.w16 = nullptr;
      p.x_scale = nullptr;
      p.kernel = kernels::Fp8MmaKernel::kChainedStreamed;
      const double chained_streamed_us = bench::time_us(
          [&] {
            kernels::act_quant_fp8(quant_chained, nullptr);
            kernels::fp8_mma_gemm(p, nullptr);
          },
          iters);
      p.x_scale = xs;
      p.x_scale_ld = m;
      p.x16 = nullptr;
      p.kernel = kernels::Fp8MmaKernel::kAuto;
      // What a default linear runs (CudaOps::linear).
      const kernels::Fp8MmaKernel chosen =
          cuda::linear_takes_f16_wgmma(p) ? kernels::Fp8MmaKernel::kF16Wgmma : kernels::fp8_mma_gemm_choice(p);
      const double mma_us = chosen == kernels::Fp8MmaKernel::kF16Wgmma ? f16_converting_us
                            : chosen == kernels::Fp8MmaKernel::kStaged ? staged_us
                                                                        : streamed_us;
      const double flops = 2.0 * m * c.n * c.k;
      const double weight_bytes = static_cast<double>(c.n) * c.k;
      std::printf(
          "%-18s %6ld %12.2f %8.1f %12.2f %8.1f %10.2f %8.1f %12.2f %8.1f %10.2f %8.1f %10.2f %8.1f %10.2f %8.1f %10.2f "
          "%8.1f %12.2f %8s %9.0f %10.2f\n",
          c.name, static_cast<long>(m), us, flops / us * 1e-6, streamed_us, flops / streamed_us * 1e-6, staged_us,
          flops / staged_us * 1e-6, staged_ix_us, flops / staged_ix_us * 1e-6, wgmma_us, flops / wgmma_us * 1e-6,
          wgmma_cp_us, flops / wgmma_cp_us * 1e-6, f16_us,
          flops / f16_us * 1e-6, f16_converting_us, flops / f16_converting_us * 1e-6, chained_streamed_us,
          kernels::fp8_mma_kernel_name(chosen),
          weight_bytes / mma_us * 1e-3, weight_bytes / kMemoryBandwidth * 1e6);
      std::fflush(stdout);
      cudaFree(x);
      cudaFree(xq);
      cudaFree(xs);
      cudaFree(w);
      cudaFree(ws);
      cudaFree(out);
      cudaFree(x16);
      cudaFree(w16);
    }
  }
  return 0;
}
