// The serving engine's cache options shared by `serve` and `bench throughput` (vLLM's flag
// names), and the start-up line that says what the cache holds.
#pragma once

#include <optional>

#include <CLI/CLI.hpp>

#include "runtime/engine.h"
#include "tools/backend.h"

namespace dsv4::tools {

struct CacheOptions {
  std::optional<bool> prefix_caching;  // unset: the device's default (below)
  int64_t memory_bytes = 0;            // --kv-cache-memory-bytes; 0: not used
  int64_t max_snapshots = 0;           // --max-prefix-snapshots; 0: the engine's default
};

// Adds `--enable-prefix-caching` / `--no-enable-prefix-caching` (default: on with --device cpu,
// where a hit is tested to give a miss's tokens bit for bit; off with cuda until the engine's
// shared page pool has run on the GPU), `--kv-cache-memory-bytes` and `--max-prefix-snapshots` to
// `cmd`.
void add_cache_options(CLI::App* cmd, CacheOptions& options);
// Sets config's enable_prefix_caching, cache_memory_bytes and max_prefix_snapshots from the options.
void apply_cache_options(const CacheOptions& options, Device device, EngineConfig& config);

// "`command`: cache: N blocks of B tokens (X MiB): T tokens, C sequences of max_model_len at once,
// prefix caching on|off" on stderr: how many tokens fit and how many longest requests run at once.
void print_cache_report(const char* command, const Engine& engine);

}  // namespace dsv4::tools
