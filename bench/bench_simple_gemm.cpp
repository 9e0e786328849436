// Times kernels::simple_gemm (the fp32-accumulating linear for bf16/fp32 weights, exact-math FP8
// and grouped_linear) at V4-Flash decode shapes, for the kernel kAuto picks and for each kernel
// forced, and prints the weight's GB/s beside the H200's memory floor (4.28 TB/s).
// Usage: bench_simple_gemm [iterations]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/device.h"
#include "kernels/cuda_check.h"
#include "cuda_timing.h"
#include "kernels/gemm/simple_gemm.h"

namespace {

using dsv4::kernels::GemmWeight;
using dsv4::kernels::SimpleGemmKernel;

struct Case {
  const char* name;
  int64_t n, k, groups;
  GemmWeight w;
  bool x_bf16, y_bf16;
};

constexpr double kMemoryBandwidth = 4.28e12;  // bytes/s, measured device-to-device copy (ENV.md)

int64_t weight_size(GemmWeight w) { return w == GemmWeight::kF32 ? 4 : w == GemmWeight::kBF16 ? 2 : 1; }

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  if (!cuda::device_available()) {
    std::fprintf(stderr, "bench_simple_gemm: no CUDA device\n");
    return 1;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 50;
  const Case cases[] = {{"ffn.gate bf16, f32 x", 256, 4096, 1, GemmWeight::kBF16, false, false},
                        {"weights_proj bf16", 64, 4096, 1, GemmWeight::kBF16, true, false},
                        {"wo_a e4m3 x8 groups", 1024, 4096, 8, GemmWeight::kE4M3, true, true},
                        {"compressor bf16, f32 x", 512, 4096, 1, GemmWeight::kBF16, false, false}};
  const int64_t ms[] = {1, 16, 64};
  std::printf("%-24s %4s %6s %9s %11s %9s %9s %9s\n", "linear", "M", "auto", "auto us", "weight GB/s", "floor us",
              "gemv us", "tiled us");
  for (const Case& c : cases) {
    const int64_t rows = c.n * c.groups, kb = (c.k + 127) / 128, scale_ld = (kb + 3) / 4 * 4;
    const int64_t weight_bytes = rows * c.k * weight_size(c.w);
    void *w, *x, *y;
    float* scale;
    DSV4_CUDA_CHECK(cudaMalloc(&w, weight_bytes));
    DSV4_CUDA_CHECK(cudaMemset(w, 0x38, weight_bytes));  // e4m3 1.0, small bf16/f32 values
    DSV4_CUDA_CHECK(cudaMalloc(&scale, (rows + 127) / 128 * scale_ld * sizeof(float)));
    const std::vector<float> ones(static_cast<size_t>((rows + 127) / 128 * scale_ld), 1.0f);
    DSV4_CUDA_CHECK(cudaMemcpy(scale, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (const int64_t m : ms) {
      const int64_t x_bytes = m * c.groups * c.k * (c.x_bf16 ? 2 : 4), y_bytes = m * rows * (c.y_bf16 ? 2 : 4);
      DSV4_CUDA_CHECK(cudaMalloc(&x, x_bytes));
      DSV4_CUDA_CHECK(cudaMalloc(&y, y_bytes));
      DSV4_CUDA_CHECK(cudaMemset(x, 0x3c, x_bytes));
      kernels::SimpleGemmParams p;
      p.x = {x, c.x_bf16};
      p.ldx = c.groups * c.k;
      p.w = w;
      p.w_type = c.w;
      p.w_scale = c.w == GemmWeight::kE4M3 ? scale : nullptr;
      p.w_scale_ld = scale_ld;
      p.y = {y, c.y_bf16};
      p.ldy = rows;
      p.m = m;
      p.n = c.n;
      p.k = c.k;
      p.groups = c.groups;
      p.x_group_stride = c.k;
      p.y_group_stride = c.n;
      double us[3];
      const SimpleGemmKernel kernels[3] = {SimpleGemmKernel::kAuto, SimpleGemmKernel::kGemv, SimpleGemmKernel::kTiled};
      for (int i = 0; i < 3; ++i) {
        p.kernel = kernels[i];
        us[i] = bench::time_us([&] { kernels::simple_gemm(p, nullptr); }, iters);
      }
      p.kernel = SimpleGemmKernel::kAuto;
      const bool auto_gemv = kernels::simple_gemm_choice(p) == SimpleGemmKernel::kGemv;
      std::printf("%-24s %4ld %6s %9.2f %11.0f %9.2f %9.2f %9.2f\n", c.name, static_cast<long>(m),
                  auto_gemv ? "gemv" : "tiled", us[0], weight_bytes / us[0] * 1e-3,
                  weight_bytes / kMemoryBandwidth * 1e6, us[1], us[2]);
      cudaFree(x);
      cudaFree(y);
    }
    cudaFree(w);
    cudaFree(scale);
  }
  return 0;
}
