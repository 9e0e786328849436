// Sizing the engine's caches from device memory (--gpu-memory-utilization): the arithmetic of
// runtime/cache_sizing.h on made-up totals (the normal case, a share too small for the weights, a
// share too small for one sequence of max_model_len).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/cache_sizing.h"

namespace dsv4 {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// `call` throws a UsageError whose message holds every one of `words`.
template <typename F>
void expect_usage_error(F&& call, const std::vector<std::string>& words) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << words.front();
  } catch (const UsageError& e) {
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in: " << e.what();
  }
}

// 4096 tokens in blocks of 64 of 1 MiB beside 1 GiB of fixed state: 1 GiB + 64 MiB at least.
CacheFootprint footprint() { return {kGiB, kMiB, 64, 4096, 8}; }

TEST(CacheMemoryFromUtilization, IsTheShareLessTheMemoryInUseTheActivationsAndTheSnapshots) {
  const GpuMemoryBudget b{0.9, 100 * kGiB, 60 * kGiB, 2 * kGiB, kGiB};
  EXPECT_EQ(cache_memory_from_utilization(b, footprint()), static_cast<int64_t>(std::floor(0.9 * 100 * kGiB)) - 63 * kGiB);
  // Exactly one sequence of max_model_len beside the fixed state is enough.
  const GpuMemoryBudget exact{1.0, 10 * kGiB, 10 * kGiB - (kGiB + 64 * kMiB), 0, 0};
  EXPECT_EQ(cache_memory_from_utilization(exact, footprint()), kGiB + 64 * kMiB);
}

TEST(CacheMemoryFromUtilization, AShareBelowTheMemoryInUseNamesTheFlagTheBytesInUseAndTheTotal) {
  const GpuMemoryBudget b{0.5, 100 * kGiB, 60 * kGiB, 2 * kGiB, 0};
  expect_usage_error([&] { cache_memory_from_utilization(b, footprint()); },
                     {"--gpu-memory-utilization 0.50", "(64424509440 bytes) are in use once the weights are loaded",
                      "of the GPU's 100.00 GiB (107374182400 bytes)", "raise --gpu-memory-utilization"});
  // The activations alone can tip it too.
  const GpuMemoryBudget tipped{0.5, 100 * kGiB, 49 * kGiB, 2 * kGiB, 0};
  expect_usage_error([&] { cache_memory_from_utilization(tipped, footprint()); },
                     {"--gpu-memory-utilization 0.50", "nothing is left for the KV cache"});
}

TEST(CacheMemoryFromUtilization, LessThanOneSequenceOfMaxModelLenSuggestsALowerMaxModelLen) {
  // 1 GiB + 40 MiB left: 40 blocks beside the fixed state, 2,560 tokens of the 4,096 needed.
  const GpuMemoryBudget b{1.0, 100 * kGiB, 100 * kGiB - (kGiB + 40 * kMiB), 0, 0};
  expect_usage_error([&] { cache_memory_from_utilization(b, footprint()); },
                     {"--gpu-memory-utilization 1.00 leaves 1.04 GiB (1115684864 bytes) for the KV cache",
                      "less than one sequence of max_model_len 4096 needs beside the fixed state of 8 sequences "
                      "(1.06 GiB (1140850688 bytes))",
                      "it holds sequences of up to 2560 tokens", "lower --max-model-len",
                      "raise --gpu-memory-utilization"});
}

TEST(CacheMemoryFromUtilization, RefusesAShareOutsideZeroToOne) {
  for (double u : {0.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
    expect_usage_error([&] { cache_memory_from_utilization({u, 100 * kGiB, 0, 0, 0}, footprint()); },
                       {"--gpu-memory-utilization", "must be in (0, 1]"});
}

}  // namespace
}  // namespace dsv4
