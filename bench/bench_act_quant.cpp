// Times kernels::act_quant_fp8 at an 8k V4-Flash prefill's shapes, in the form the default
// numerics take (codes as fp16 values in the f16 WGMMA GEMM's K order, q16): the dense linears'
// rows, the routed experts' input scattered to a token's 6 rows, and the experts' hidden rows
// from the SwiGLU of gate and up. Each beside its floor: the bytes it must move (x's bf16 values
// read, q16's fp16 values and the scales written) at 4.28 TB/s (ENV.md).
// Usage: bench_act_quant [iterations]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_timing.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm/act_quant.h"

namespace {

constexpr double kCopyRate = 4.28e12;  // bytes/s
constexpr int64_t kTokens = 8192, kTopK = 6;

// A device buffer of `count` T, filled from a fixed generator (bf16 values of a spread of sizes
// for uint16_t, so that blocks' scales differ).
template <typename T>
T* device_buffer(int64_t count) {
  void* p = nullptr;
  DSV4_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(1, count)) * sizeof(T)));
  DSV4_CUDA_CHECK(cudaMemset(p, 0, static_cast<size_t>(count) * sizeof(T)));
  return static_cast<T*>(p);
}

uint16_t* random_bf16(int64_t count, std::mt19937& rng) {
  std::vector<uint16_t> host(static_cast<size_t>(count));
  std::uniform_int_distribution<int> exponent(120, 130), mantissa(0, 127), sign(0, 1);
  for (auto& v : host) v = static_cast<uint16_t>((sign(rng) << 15) | (exponent(rng) << 7) | mantissa(rng));
  return dsv4::bench::device_copy(host);
}

void report(const char* name, int64_t rows, int64_t k, double read_bytes, double write_bytes, double us) {
  const double floor_us = 1e6 * (read_bytes + write_bytes) / kCopyRate;
  std::printf("%-34s %6lld x %-5lld %9.1f us  floor %7.1f us  %5.1f%% of the copy rate\n", name,
              static_cast<long long>(rows), static_cast<long long>(k), us, floor_us, 100.0 * floor_us / us);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  if (iters <= 0) {
    std::fprintf(stderr, "usage: bench_act_quant [iterations > 0]\n");
    return 2;
  }
  std::mt19937 rng(7);
  std::printf("act_quant_fp8 at an 8k prefill's shapes, q16 in the f16 WGMMA order, mean of %d runs\n", iters);

  for (const int64_t k : {int64_t{4096}, int64_t{8192}}) {  // wq_a + wkv's input, wo_b's
    uint16_t* x = random_bf16(kTokens * k, rng);
    auto* q16 = device_buffer<uint16_t>(kTokens * k);
    auto* scale = device_buffer<float>(kTokens * k / 128);
    kernels::ActQuantParams p{x, nullptr, scale, kTokens, kTokens, k};
    p.q16 = q16;
    const double us = bench::time_us([&] { kernels::act_quant_fp8(p, nullptr); }, iters);
    report("rows", kTokens, k, 2.0 * kTokens * k, 2.0 * kTokens * k + 4.0 * kTokens * k / 128, us);
    DSV4_CUDA_CHECK(cudaFree(x));
    DSV4_CUDA_CHECK(cudaFree(q16));
    DSV4_CUDA_CHECK(cudaFree(scale));
  }

  const int64_t rows = kTokens * kTopK;
  {  // the experts' input: a token's row to its 6 rows of the plan (a random permutation)
    constexpr int64_t k = 4096;
    std::vector<int32_t> row_of(static_cast<size_t>(rows));
    std::iota(row_of.begin(), row_of.end(), 0);
    std::shuffle(row_of.begin(), row_of.end(), rng);
    int32_t* scatter = bench::device_copy(row_of);
    uint16_t* x = random_bf16(kTokens * k, rng);
    auto* q16 = device_buffer<uint16_t>(rows * k);
    auto* scale = device_buffer<float>(rows * k / 128);
    kernels::ActQuantParams p{x, nullptr, scale, rows, rows, k};
    p.q16 = q16;
    p.scatter_rows = scatter;
    p.scatter_fanout = kTopK;
    const double us = bench::time_us([&] { kernels::act_quant_fp8(p, nullptr); }, iters);
    report("scatter (6 rows a token)", rows, k, 2.0 * kTokens * k, 2.0 * rows * k + 4.0 * rows * k / 128, us);
    DSV4_CUDA_CHECK(cudaFree(scatter));
    DSV4_CUDA_CHECK(cudaFree(x));
    DSV4_CUDA_CHECK(cudaFree(q16));
    DSV4_CUDA_CHECK(cudaFree(scale));
  }
  {  // the experts' hidden rows: SwiGLU of gate and up, each row weighted
    constexpr int64_t k = 2048;
    std::vector<float> weights(static_cast<size_t>(rows));
    std::uniform_real_distribution<float> weight(0.05f, 0.5f);
    for (auto& w : weights) w = weight(rng);
    float* row_weight = bench::device_copy(weights);
    uint16_t* gate = random_bf16(rows * k, rng);
    uint16_t* up = random_bf16(rows * k, rng);
    auto* q16 = device_buffer<uint16_t>(rows * k);
    auto* scale = device_buffer<float>(rows * k / 128);
    kernels::ActQuantParams p{gate, nullptr, scale, rows, rows, k};
    p.q16 = q16;
    p.swiglu_up = up;
    p.swiglu_row_weight = row_weight;
    p.swiglu_limit = 10.0f;
    const double us = bench::time_us([&] { kernels::act_quant_fp8(p, nullptr); }, iters);
    report("swiglu (gate, up, row weights)", rows, k, 4.0 * rows * k, 2.0 * rows * k + 4.0 * rows * k / 128, us);
    DSV4_CUDA_CHECK(cudaFree(row_weight));
    DSV4_CUDA_CHECK(cudaFree(gate));
    DSV4_CUDA_CHECK(cudaFree(up));
    DSV4_CUDA_CHECK(cudaFree(q16));
    DSV4_CUDA_CHECK(cudaFree(scale));
  }
  return 0;
}
