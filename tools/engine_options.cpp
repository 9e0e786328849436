// The engine's cache flags and start-up report (engine_options.h).
#include "tools/engine_options.h"

#include <cstdio>
#include <string>

#include "tools/number_checks.h"

namespace dsv4::tools {

namespace {

// "95.3 MiB", or "12.3 GiB" from 1 GiB up.
std::string size_str(int64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  char text[32];
  if (mib >= 1024.0) std::snprintf(text, sizeof text, "%.1f GiB", mib / 1024.0);
  else std::snprintf(text, sizeof text, "%.1f MiB", mib);
  return text;
}

}  // namespace

void add_cache_options(CLI::App* cmd, CacheOptions& options) {
  cmd->add_flag_function(
      "--enable-prefix-caching,!--no-enable-prefix-caching",
      [&options](int64_t count) { options.prefix_caching = count > 0; },
      "Share the cache entries of a common prompt prefix between requests (default: on); a hit gives the tokens "
      "of a miss");
  cmd->add_option("--kv-cache-memory-bytes", options.memory_bytes,
                  "Bytes the caches may take; the blocks are sized from it, over --gpu-memory-utilization (0: not "
                  "used)")
      ->check(non_negative_number())
      ->default_str("0");
  cmd->add_option("--gpu-memory-utilization", options.gpu_memory_utilization,
                  "With --device cuda and no --kv-cache-memory-bytes: the share of the GPU's memory the engine may "
                  "fill (as vLLM); the caches get it less the memory in use after loading, the activations' peak in "
                  "a profiled step of --max-num-batched-tokens tokens and the prefix snapshots' room. Without a GPU, "
                  "or at 0, the caches hold --max-num-seqs requests of --max-model-len")
      ->check(number_from_to(0.0, 1.0))
      ->default_str("0.9");
  cmd->add_option("--max-prefix-snapshots", options.max_snapshots,
                  "Prefix caching: copies of a sequence's window and compressor state kept, so requests resume on them "
                  "without recomputing (7.4 MB each for V4-Flash; 0: twice --max-num-seqs)")
      ->check(non_negative_number())
      ->default_str("0");
  cmd->add_option("--prefix-snapshot-interval", options.snapshot_interval,
                  "Prefix caching: prefills also stop for a state snapshot every this many tokens (a multiple of 128 "
                  "for DeepSeek-V4), so that a request sharing only the start of an earlier prompt (a system prompt, "
                  "then more than 128 tokens of its own) resumes within that many tokens of where they part; 0: only "
                  "at the last multiple of 128 before each prompt's end, and a shorter shared start hits only beyond "
                  "the tokens a resume must recompute (5,461 on V4-Flash). Each stop cuts that prefill's step there")
      ->check(non_negative_number())
      ->default_str("0");
  cmd->add_option_function<std::string>(
         "--kv-cache-dtype",
         [&options](const std::string& name) {
           options.kv_cache_dtype = name == "fp8" ? KvCacheDtype::kFp8 : name == "bf16" ? KvCacheDtype::kBf16
                                                                                         : KvCacheDtype::kAuto;
         },
         "The caches' entries: bf16 rows, or fp8: attention entries in DeepSeek-V4's 584-byte FP8 layout and indexer "
         "keys in 68-byte MXFP4, the same numbers in 57% and 27% of the bytes (docs/MODEL.md 8.1). auto: fp8 where "
         "the backend reads packed entries (cpu; cuda with its tensor-core attention, the default), else bf16. Exact "
         "math keeps f32 rows")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}))
      ->default_str("auto");
}

void add_long_prefill_option(CLI::App* cmd, EngineConfig& config) {
  cmd->add_option("--long-prefill-token-threshold", config.long_prefill_token_threshold,
                  "Most tokens one request's prefill takes in a step (0: up to --max-num-batched-tokens): shorter steps "
                  "for the requests decoding beside a long prompt, its first token later")
      ->check(non_negative_number())
      ->default_str("0");
}

void apply_cache_options(const CacheOptions& options, EngineConfig& config) {
  // The shared pool with or without prefix caching: the caches in the blocks the scheduler counts,
  // and the running sequences in state slots, whose decode steps share a few CUDA graphs.
  config.shared_cache_pool = true;
  config.enable_prefix_caching = options.prefix_caching;
  config.cache_memory_bytes = options.memory_bytes;
  config.gpu_memory_utilization = options.gpu_memory_utilization;
  config.max_prefix_snapshots = options.max_snapshots;
  config.prefix_snapshot_interval = options.snapshot_interval;
  config.kv_cache_dtype = options.kv_cache_dtype;
}

void print_cache_report(const char* command, const Engine& engine) {
  const EngineConfig& c = engine.config();
  const CacheSizing& sizing = engine.cache_sizing();
  std::string how;
  switch (sizing.rule) {
    case CacheSizing::Rule::kNumCacheBlocks: how = "from --num-cache-blocks"; break;
    case CacheSizing::Rule::kCacheMemoryBytes: how = "from --kv-cache-memory-bytes"; break;
    case CacheSizing::Rule::kGpuMemoryUtilization: {
      const GpuMemoryBudget& b = sizing.budget;
      char text[256];
      std::snprintf(text, sizeof text,
                    "from --gpu-memory-utilization %.2f of %s (in use after loading %s, activations' peak %s, "
                    "prefix snapshots up to %s)",
                    b.utilization, size_str(b.total_bytes).c_str(), size_str(b.used_bytes).c_str(),
                    size_str(b.activation_bytes).c_str(), size_str(b.snapshot_bytes).c_str());
      how = text;
      break;
    }
    case CacheSizing::Rule::kLongestRequests:
      how = "for --max-num-seqs requests of --max-model-len";
      if (sizing.no_device_memory)
        how += " (--gpu-memory-utilization does not apply without a GPU)";
      break;
  }
  const long long tokens = static_cast<long long>(c.num_cache_blocks * c.block_size);
  const std::string ranks = engine.data_parallel_size() > 1
                                ? " on each of " + std::to_string(engine.data_parallel_size()) + " data-parallel ranks"
                                : "";
  std::fprintf(stderr,
               "%s: cache%s: %s of %s entries %s: %lld blocks of %lld tokens: %lld tokens, %.2f sequences of "
               "max_model_len %lld at once; prefix caching %s\n",
               command, ranks.c_str(), size_str(engine.cache_bytes()).c_str(),
               c.exact_math ? "f32" : c.kv_cache_dtype == KvCacheDtype::kFp8 ? "fp8" : "bf16", how.c_str(), static_cast<long long>(c.num_cache_blocks),
               static_cast<long long>(c.block_size), tokens, static_cast<double>(tokens) / static_cast<double>(c.max_model_len),
               static_cast<long long>(c.max_model_len), c.enable_prefix_caching ? "on" : "off");
}

}  // namespace dsv4::tools
