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

// The device buffers of the case being timed (up to 0.6 GB), freed before the next case.
std::vector<void*> case_buffers;

template <typename T>
T* kept(T* p) {
  case_buffers.push_back(p);
  return p;
}

void free_case_buffers() {
  for (void* p : case_buffers) DSV4_CUDA_CHECK(cudaFree(p));
  case_buffers.clear();
}

// A zeroed device buffer of `count` T.
template <typename T>
T* device_buffer(int64_t count) {
  void* p = nullptr;
  DSV4_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(1, count)) * sizeof(T)));
  DSV4_CUDA_CHECK(cudaMemset(p, 0, static_cast<size_t>(count) * sizeof(T)));
  return kept(static_cast<T*>(p));
}

// bf16 values of a spread of sizes, so that the blocks' scales differ.
uint16_t* random_bf16(int64_t count, std::mt19937& rng) {
  std::vector<uint16_t> host(static_cast<size_t>(count));
  std::uniform_int_distribution<int> exponent(120, 130), mantissa(0, 127), sign(0, 1);
  for (auto& v : host) v = static_cast<uint16_t>((sign(rng) << 15) | (exponent(rng) << 7) | mantissa(rng));
  return kept(dsv4::bench::device_copy(host));
}

// act_quant_fp8's parameters for `rows` rows of k from x into fresh q16 and scales.
dsv4::kernels::ActQuantParams quant_params(const uint16_t* x, int64_t rows, int64_t k) {
  dsv4::kernels::ActQuantParams p{x, nullptr, device_buffer<float>(rows * k / 128), rows, rows, k};
  p.q16 = device_buffer<uint16_t>(rows * k);
  return p;
}

// Times act_quant_fp8(p), prints it beside the floor of `read_bytes` read and q16's values and
// the scales written, and frees the case's buffers.
void time_case(const char* name, const dsv4::kernels::ActQuantParams& p, double read_bytes, int iters) {
  const double us = dsv4::bench::time_us([&] { dsv4::kernels::act_quant_fp8(p, nullptr); }, iters);
  const double floor_us = 1e6 * (read_bytes + 2.0 * p.m * p.k + 4.0 * p.m * p.k / 128) / kCopyRate;
  std::printf("%-34s %6lld x %-5lld %9.1f us  floor %7.1f us  %5.1f%% of the copy rate\n", name,
              static_cast<long long>(p.m), static_cast<long long>(p.k), us, floor_us, 100.0 * floor_us / us);
  free_case_buffers();
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

  for (const int64_t k : {int64_t{4096}, int64_t{8192}})  // wq_a + wkv's input, wo_b's
    time_case("rows", quant_params(random_bf16(kTokens * k, rng), kTokens, k), 2.0 * kTokens * k, iters);

  const int64_t rows = kTokens * kTopK;
  {  // the experts' input: a token's row to its 6 rows of the plan (a random permutation)
    constexpr int64_t k = 4096;
    std::vector<int32_t> row_of(static_cast<size_t>(rows));
    std::iota(row_of.begin(), row_of.end(), 0);
    std::shuffle(row_of.begin(), row_of.end(), rng);
    kernels::ActQuantParams p = quant_params(random_bf16(kTokens * k, rng), rows, k);
    p.scatter_rows = kept(bench::device_copy(row_of));
    p.scatter_fanout = kTopK;
    time_case("scatter (6 rows a token)", p, 2.0 * kTokens * k, iters);
  }
  {  // the experts' hidden rows: SwiGLU of gate and up, each row weighted
    constexpr int64_t k = 2048;
    std::vector<float> weights(static_cast<size_t>(rows));
    std::uniform_real_distribution<float> weight(0.05f, 0.5f);
    for (auto& w : weights) w = weight(rng);
    kernels::ActQuantParams p = quant_params(random_bf16(rows * k, rng), rows, k);
    p.swiglu_up = random_bf16(rows * k, rng);
    p.swiglu_row_weight = kept(bench::device_copy(weights));
    p.swiglu_limit = 10.0f;
    time_case("swiglu (gate, up, row weights)", p, 4.0 * rows * k, iters);
  }
  return 0;
}
