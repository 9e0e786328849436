// Times the routed experts' grouped GEMMs of a V4-Flash prefill on the f16 WGMMA kernel (MXFP4
// weights converted in the kernel, f16_wgmma_gemm.cu) and on its chained order's form
// (kChainedBf16Wgmma, `--fp8-gemm chained`) alone, without the rest of the model: T
// tokens each routed to 6 of 256 experts drawn at random, the pairs grouped by expert into tiles of
// up to 128 rows as the expert plan builds them, then gate (or up: the same shape) [I x D] and down
// [D x I] of every expert. Prints time, TFLOP/s of the useful MACs and the floor at the measured
// 16-bit tensor rate (cuBLASLt's bf16 GEMM, 792 TFLOP/s on the H200: ENV.md).
// Usage: bench_routed_experts [iterations] [tokens...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cuda/device.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm/e2m1_layout.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "cuda_timing.h"

namespace {

using namespace dsv4;

constexpr int64_t kExperts = 256, kTopK = 6, kHidden = 4096, kInter = 2048;
constexpr double kTensorRate = 792e12;  // flop/s

// Every expert's MXFP4 weight [n, k] in the kernels' layout (random codes and shifts, unit block
// scales) and the device tables of pointers the grouped call takes.
struct ExpertWeights {
  int64_t n, k, scale_ld;
  std::vector<void*> buffers;
  const uint8_t* const* w_of = nullptr;
  const uint8_t* const* shift_of = nullptr;
  const float* const* scale_of = nullptr;

  ExpertWeights(int64_t n_, int64_t k_, std::mt19937& rng) : n(n_), k(k_), scale_ld((k_ / 128 + 3) / 4 * 4) {
    const int64_t rows = kernels::e2m1_layout_rows(n);
    std::vector<uint8_t> codes(static_cast<size_t>(rows * k / 2)), shifts(static_cast<size_t>(rows * k / 32));
    const std::vector<float> scales(static_cast<size_t>((n + 127) / 128 * scale_ld), 1.0f);
    std::vector<const uint8_t*> ws, ss;
    std::vector<const float*> scs;
    for (int64_t e = 0; e < kExperts; ++e) {
      for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
      for (uint8_t& b : shifts) b = static_cast<uint8_t>(rng() % 7);  // 0..kMxfp4MaxShift
      ws.push_back(keep(bench::device_copy(codes)));
      ss.push_back(keep(bench::device_copy(shifts)));
      scs.push_back(keep(bench::device_copy(scales)));
    }
    w_of = keep(bench::device_copy(ws));
    shift_of = keep(bench::device_copy(ss));
    scale_of = keep(bench::device_copy(scs));
  }
  ~ExpertWeights() {
    for (void* p : buffers) cudaFree(p);
  }
  ExpertWeights(const ExpertWeights&) = delete;
  ExpertWeights& operator=(const ExpertWeights&) = delete;

  template <typename T>
  T* keep(T* p) {
    buffers.push_back(const_cast<void*>(static_cast<const void*>(p)));
    return p;
  }
};

// The tiles of `tokens` tokens' pairs: each token's 6 distinct experts at random, an expert's rows
// contiguous and cut into tiles of up to 128.
std::vector<kernels::Fp8MmaTile> random_tiles(int64_t tokens, std::mt19937& rng) {
  std::vector<int32_t> count(kExperts, 0);
  std::vector<int32_t> experts(kExperts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int32_t e = 0; e < kExperts; ++e) experts[e] = e;
    for (int64_t j = 0; j < kTopK; ++j) {
      std::swap(experts[j], experts[j + rng() % (kExperts - j)]);
      ++count[experts[j]];
    }
  }
  std::vector<kernels::Fp8MmaTile> tiles;
  int32_t expert_begin = 0;  // rows: the experts' one after another
  for (int32_t e = 0; e < kExperts; ++e) {
    for (int32_t r = 0; r < count[e]; r += kernels::kFp8MmaStagedTileRows)
      tiles.push_back(
          {.group = e, .row_begin = expert_begin + r, .rows = std::min(kernels::kFp8MmaStagedTileRows, count[e] - r)});
    expert_begin += count[e];
  }
  return tiles;
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::device_available()) {
    std::fprintf(stderr, "bench_routed_experts: no CUDA device\n");
    return 1;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  std::vector<int64_t> token_counts;
  for (int i = 2; i < argc; ++i) token_counts.push_back(std::atoll(argv[i]));
  if (token_counts.empty()) token_counts = {2048, 8192};
  std::mt19937 rng(7);
  const ExpertWeights gate(kInter, kHidden, rng), down(kHidden, kInter, rng);
  std::printf("%-6s %6s %6s %-19s %10s %8s %10s %8s %10s %8s\n", "tokens", "pairs", "tiles", "kernel", "gate us",
              "TFLOP/s", "down us", "TFLOP/s", "layer us", "floor us");
  for (const int64_t tokens : token_counts) {
    const int64_t pairs = tokens * kTopK, padded = (pairs + 3) / 4 * 4;
    const std::vector<kernels::Fp8MmaTile> tiles = random_tiles(tokens, rng);
    kernels::Fp8MmaTile* tiles_d = bench::device_copy(tiles);
    int32_t* count_d = bench::device_copy(std::vector<int32_t>{static_cast<int32_t>(tiles.size())});
    // x: 16-bit values in 2^-15 .. 1 as fp16 or bf16 (their exact values do not change the time),
    // unit scales.
    const int64_t k_max = std::max(kHidden, kInter);
    std::vector<uint16_t> x_host(static_cast<size_t>(padded * k_max));
    for (uint16_t& v : x_host) v = static_cast<uint16_t>(0x3800 + rng() % 0x800);
    uint16_t* x16 = bench::device_copy(x_host);
    float* x_scale = bench::device_copy(std::vector<float>(static_cast<size_t>(k_max / 128 * padded), 1.0f));
    uint16_t* y = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(&y, static_cast<size_t>(pairs * kHidden) * sizeof(uint16_t)));

    const auto grouped = [&](const ExpertWeights& w, kernels::Fp8MmaKernel kernel) {
      kernels::Fp8MmaGemmParams p;
      p.x = reinterpret_cast<const uint8_t*>(x16);
      p.x16 = x16;
      p.x_scale = x_scale;
      p.x_scale_ld = padded;
      p.w_codes = kernels::Fp8MmaWeightCodes::kE2M1;
      p.kernel = kernel;
      p.w_scale_ld = w.scale_ld;
      p.y = {y, true};
      p.ldy = w.n;
      p.m = pairs;
      p.n = w.n;
      p.k = w.k;
      p.tiles = tiles_d;
      p.tile_count = count_d;
      p.max_tiles = static_cast<int64_t>(tiles.size());
      p.tile_rows = kernels::kFp8MmaStagedTileRows;
      p.group_w = w.w_of;
      p.group_w_scale = w.scale_of;
      p.group_w_shift = w.shift_of;
      return p;
    };
    for (const kernels::Fp8MmaKernel kernel : {kernels::Fp8MmaKernel::kF16Wgmma, kernels::Fp8MmaKernel::kChainedBf16Wgmma}) {
      const kernels::Fp8MmaGemmParams gate_p = grouped(gate, kernel), down_p = grouped(down, kernel);
      const double gate_us = bench::time_us([&] { kernels::fp8_mma_gemm(gate_p, nullptr); }, iters);
      const double down_us = bench::time_us([&] { kernels::fp8_mma_gemm(down_p, nullptr); }, iters);
      const double flops = 2.0 * pairs * kInter * kHidden;  // each GEMM's
      std::printf("%-6ld %6ld %6zu %-19s %10.1f %8.1f %10.1f %8.1f %10.1f %8.1f\n", static_cast<long>(tokens),
                  static_cast<long>(pairs), tiles.size(), kernels::fp8_mma_kernel_name(kernel), gate_us,
                  flops / gate_us * 1e-6, down_us, flops / down_us * 1e-6, 2 * gate_us + down_us,
                  3 * flops / kTensorRate * 1e6);
      std::fflush(stdout);
    }
    cudaFree(tiles_d);
    cudaFree(count_d);
    cudaFree(x16);
    cudaFree(x_scale);
    cudaFree(y);
  }
  return 0;
}
