// The serving engine's cache and scheduling options shared by `serve` and `bench throughput`
// (vLLM's flag names), and the start-up line that says what the cache holds and how its size was
// chosen.
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/engine.h"

namespace dsv4::tools {

struct CacheOptions {
  bool prefix_caching = true;   // --enable-prefix-caching / --no-enable-prefix-caching
  int64_t memory_bytes = 0;     // --kv-cache-memory-bytes; 0: not used
  double gpu_memory_utilization = 0.9;  // --gpu-memory-utilization; 0: not used
  int64_t max_snapshots = 0;    // --max-prefix-snapshots; 0: the engine's default
  int64_t snapshot_interval = 0;  // --prefix-snapshot-interval; 0: off
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;  // --kv-cache-dtype auto|bf16|fp8
};

// Adds `--enable-prefix-caching` / `--no-enable-prefix-caching` (default on: a hit gives a miss's
// tokens, bit for bit on the CPU and tested on the H200), `--kv-cache-memory-bytes`,
// `--gpu-memory-utilization` (default 0.9), `--max-prefix-snapshots` and `--kv-cache-dtype` to
// `cmd`.
void add_cache_options(CLI::App* cmd, CacheOptions& options);
// Sets config's enable_prefix_caching, cache_memory_bytes, gpu_memory_utilization,
// max_prefix_snapshots and kv_cache_dtype from the options.
void apply_cache_options(const CacheOptions& options, EngineConfig& config);

// Adds `--long-prefill-token-threshold` (default 0, no limit) to `cmd`, into
// config.long_prefill_token_threshold.
void add_long_prefill_option(CLI::App* cmd, EngineConfig& config);

// "`command`: cache[ on each of N data-parallel ranks]: X GiB of <dtype> entries from <how>: N blocks of B tokens: T tokens, C
// sequences of max_model_len at once; prefix caching on|off" on stderr: how the size was chosen (Engine::cache_sizing: with
// --gpu-memory-utilization the device's total and what was in use, or that the flag does not apply
// to a backend without device memory), how many tokens fit and how many longest requests run at once.
void print_cache_report(const char* command, const Engine& engine);

}  // namespace dsv4::tools
