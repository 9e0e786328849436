// The arithmetic of sizing the caches from the device's memory (cache_sizing.h).
#include "runtime/cache_sizing.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace dsv4 {

namespace {

// "41.91 GiB (45000000000 bytes)": readable, and exact for the small sizes of tests.
std::string bytes_str(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f GiB (%lld bytes)", static_cast<double>(bytes) / double(1 << 30),
                static_cast<long long>(bytes));
  return text;
}

std::string utilization_str(double utilization) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", utilization);
  return text;
}

}  // namespace

int64_t cache_memory_from_utilization(const GpuMemoryBudget& b, const CacheFootprint& f) {
  const std::string flag = "--gpu-memory-utilization " + utilization_str(b.utilization);
  if (!(b.utilization > 0.0 && b.utilization <= 1.0))
    throw UsageError(flag + ": the share of the GPU's memory the engine may fill must be in (0, 1]");
  const auto allowed = static_cast<int64_t>(std::floor(b.utilization * static_cast<double>(b.total_bytes)));
  const int64_t taken = b.used_bytes + b.activation_bytes + b.snapshot_bytes;
  const int64_t left = allowed - taken;
  const std::string arithmetic = " (" + utilization_str(b.utilization) + " x " + bytes_str(b.total_bytes) +
                                 " of device memory, less " + bytes_str(b.used_bytes) +
                                 " in use once the weights are loaded, " + bytes_str(b.activation_bytes) +
                                 " for the largest step's activations and " + bytes_str(b.snapshot_bytes) +
                                 " for prefix caching's state snapshots)";
  if (left <= 0)
    throw UsageError(flag + " allows " + bytes_str(allowed) + " of the GPU's " + bytes_str(b.total_bytes) + ", but " +
                     bytes_str(b.used_bytes) + " are in use once the weights are loaded (by this process and any other)" +
                     (b.activation_bytes + b.snapshot_bytes > 0
                          ? " and the largest step's activations and the state snapshots need " +
                                bytes_str(b.activation_bytes + b.snapshot_bytes) + " more"
                          : std::string()) +
                     ": nothing is left for the KV cache; raise --gpu-memory-utilization");
  const int64_t blocks_per_sequence = (f.max_model_len + f.block_size - 1) / f.block_size;
  const int64_t needed = f.fixed_bytes + blocks_per_sequence * f.block_bytes;
  if (left < needed) {
    // The longest sequence the rest holds in whole blocks beside the fixed state (vLLM's
    // "estimated maximum model length").
    const int64_t blocks = left > f.fixed_bytes && f.block_bytes > 0 ? (left - f.fixed_bytes) / f.block_bytes : 0;
    throw UsageError(flag + " leaves " + bytes_str(left) + " for the KV cache" + arithmetic +
                     ", less than one sequence of max_model_len " + std::to_string(f.max_model_len) + " needs beside the "
                     "fixed state of " + std::to_string(f.max_num_seqs) + " sequences (" + bytes_str(needed) +
                     "); it holds sequences of up to " + std::to_string(blocks * f.block_size) +
                     " tokens: lower --max-model-len (or --max-num-seqs) or raise --gpu-memory-utilization");
  }
  return left;
}

}  // namespace dsv4
