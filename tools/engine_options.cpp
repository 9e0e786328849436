// The engine's cache flags and start-up report (engine_options.h).
#include "tools/engine_options.h"

#include <cstdio>

namespace dsv4::tools {

void add_cache_options(CLI::App* cmd, CacheOptions& options) {
  cmd->add_flag_function(
      "--enable-prefix-caching,!--no-enable-prefix-caching",
      [&options](int64_t count) { options.prefix_caching = count > 0; },
      "Share the cache entries of a common prompt prefix between requests (default: on); a hit gives the tokens "
      "of a miss");
  cmd->add_option("--kv-cache-memory-bytes", options.memory_bytes,
                  "Bytes the caches may take; the blocks are sized from it (0: room for --max-num-seqs requests "
                  "of --max-model-len)")
      ->check(CLI::NonNegativeNumber)
      ->default_str("0");
  cmd->add_option("--max-prefix-snapshots", options.max_snapshots,
                  "Prefix caching: copies of a sequence's window and compressor state kept, so requests resume on them "
                  "without recomputing (7.4 MB each for V4-Flash; 0: twice --max-num-seqs)")
      ->check(CLI::NonNegativeNumber)
      ->default_str("0");
}

void apply_cache_options(const CacheOptions& options, EngineConfig& config) {
  config.enable_prefix_caching = options.prefix_caching;
  config.cache_memory_bytes = options.memory_bytes;
  config.max_prefix_snapshots = options.max_snapshots;
}

void print_cache_report(const char* command, const Engine& engine) {
  const EngineConfig& c = engine.config();
  const long long tokens = static_cast<long long>(c.num_cache_blocks * c.block_size);
  std::fprintf(stderr,
               "%s: cache: %lld blocks of %lld tokens (%.1f MiB): %lld tokens, %.2f sequences of max_model_len "
               "%lld at once; prefix caching %s\n",
               command, static_cast<long long>(c.num_cache_blocks), static_cast<long long>(c.block_size),
               static_cast<double>(engine.cache_bytes()) / (1024.0 * 1024.0), tokens,
               static_cast<double>(tokens) / static_cast<double>(c.max_model_len),
               static_cast<long long>(c.max_model_len), c.enable_prefix_caching ? "on" : "off");
}

}  // namespace dsv4::tools
