// `dsv4 bench throughput`: serving throughput and latency through the engine. N prompts of random
// token ids (input and output lengths around the given ones) are submitted at once; the engine
// runs them with continuous batching on this thread, and the report follows vLLM's serving
// benchmark: requests/s, tokens/s, and TTFT, TPOT and ITL mean / median / p99, from the times at
// which the engine emitted each token.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "tools/backend.h"
#include "tools/commands.h"
#include "tools/engine_options.h"
#include "tools/engine_ranks.h"
#include "tools/model_source.h"
#include "tools/number_checks.h"
#include "tools/serving_report.h"

namespace dsv4::tools {

namespace {

struct ThroughputOptions {
  ModelSource source;
  Device device = Device::kCpu;
  GpuOptions gpu;
  int threads = 0;
  int64_t num_prompts = 32;
  int64_t input_len = 128;
  int64_t prefix_len = 0;
  int64_t output_len = 32;
  double range_ratio = 0.0;
  uint64_t seed = 0;
  EngineConfig engine;
  float temperature = 0.0f;
  CacheOptions cache;
  bool json = false;
};

int64_t random_length(std::mt19937_64& rng, int64_t length, double range_ratio) {
  const auto lo = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(length) * (1.0 - range_ratio)));
  const auto hi = std::max<int64_t>(lo, static_cast<int64_t>(static_cast<double>(length) * (1.0 + range_ratio)));
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

void run_bench_throughput(const ThroughputOptions& o) {
  const EngineRanks ranks = make_engine_ranks(o.device, o.threads, o.gpu, o.engine.exact_math, o.source);
  const Model& model = ranks.model();
  EngineConfig config = o.engine;
  config.runner = ranks.runner.get();
  apply_cache_options(o.cache, config);
  Engine engine(ranks.ranks(), config);
  const EngineConfig& c = engine.config();
  std::fprintf(stderr,
               "bench throughput: %lld prompts, input %lld (%lld of them a shared prefix), output %lld tokens "
               "(range ratio %.2f); max_num_seqs %lld, max_num_batched_tokens %lld, max_model_len %lld%s\n",
               static_cast<long long>(o.num_prompts), static_cast<long long>(o.prefix_len + o.input_len),
               static_cast<long long>(o.prefix_len), static_cast<long long>(o.output_len), o.range_ratio,
               static_cast<long long>(c.max_num_seqs), static_cast<long long>(c.max_num_batched_tokens),
               static_cast<long long>(c.max_model_len),
               engine.data_parallel_size() > 1
                   ? (" (each of " + std::to_string(engine.data_parallel_size()) + " data-parallel ranks)").c_str()
                   : "");
  print_cache_report("bench throughput", engine);

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config()->vocab_size - 1));
  std::vector<int32_t> prefix(static_cast<size_t>(o.prefix_len));
  for (int32_t& id : prefix) id = token(rng);
  std::vector<GenerateRequest> requests;
  int64_t input_tokens = 0;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    GenerateRequest r;
    r.prompt = prefix;
    r.prompt.resize(prefix.size() + static_cast<size_t>(random_length(rng, o.input_len, o.range_ratio)));
    for (size_t k = prefix.size(); k < r.prompt.size(); ++k) r.prompt[k] = token(rng);
    r.stop.max_tokens = random_length(rng, o.output_len, o.range_ratio);
    r.stop.ignore_eos = true;
    r.sampling.temperature = o.temperature;
    r.sampling.seed = o.seed + static_cast<uint64_t>(i);
    input_tokens += static_cast<int64_t>(r.prompt.size());
    requests.push_back(std::move(r));
  }

  const EngineClock::time_point start = EngineClock::now();
  std::vector<RequestHandle> handles;
  for (GenerateRequest& r : requests) handles.push_back(engine.submit(std::move(r)));
  double peak_cache_usage = 0;
  while (engine.step()) peak_cache_usage = std::max(peak_cache_usage, engine.stats().cache_usage());

  std::vector<double> ttft, tpot, itl, e2e;
  int64_t output_tokens = 0, completed = 0;
  EngineClock::time_point end = start;
  for (RequestHandle& h : handles) {
    std::vector<EngineClock::time_point> times;
    while (!h.done()) {
      const OutputChunk chunk = h.next();
      if (!chunk.tokens.empty()) times.push_back(chunk.time);
      if (!chunk.finish) continue;
      const RequestMetrics& m = *chunk.metrics;
      if (*chunk.finish == FinishReason::kError) throw Error("bench throughput: a request failed: " + chunk.error);
      ++completed;
      output_tokens += m.completion_tokens;
      ttft.push_back(m.time_to_first_token_s());
      if (m.completion_tokens > 1) tpot.push_back(m.time_per_output_token_s());
      e2e.push_back(m.end_to_end_s());
      end = std::max(end, m.finished);
    }
    for (size_t i = 1; i < times.size(); ++i) itl.push_back(std::chrono::duration<double>(times[i] - times[i - 1]).count());
  }
  const double duration = std::chrono::duration<double>(end - start).count();
  const EngineStats stats = engine.stats();
  const LatencySummary s_ttft = summarise_ms(ttft), s_tpot = summarise_ms(tpot), s_itl = summarise_ms(itl),
                       s_e2e = summarise_ms(e2e);

  if (o.json) {
    auto summary = [](const LatencySummary& s) {
      return nlohmann::json{{"mean", s.mean_ms}, {"median", s.median_ms}, {"p99", s.percentile_ms(99)}};
    };
    const nlohmann::json j{{"completed", completed},
                           {"duration_s", duration},
                           {"total_input_tokens", input_tokens},
                           {"total_output_tokens", output_tokens},
                           {"request_throughput", completed / duration},
                           {"output_throughput", static_cast<double>(output_tokens) / duration},
                           {"total_token_throughput", static_cast<double>(input_tokens + output_tokens) / duration},
                           {"ttft_ms", summary(s_ttft)},
                           {"tpot_ms", summary(s_tpot)},
                           {"itl_ms", summary(s_itl)},
                           {"e2el_ms", summary(s_e2e)},
                           {"steps", stats.steps},
                           {"preemptions", stats.preemptions},
                           {"prefix_cache_queries", stats.prefix_cache_queries},
                           {"prefix_cache_hits", stats.prefix_cache_hits},
                           {"peak_cache_usage", peak_cache_usage},
                           {"data_parallel_size", engine.data_parallel_size()}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s\n", centred_title(" Serving Benchmark Result ", '=').c_str());
  print_result_count("Successful requests:", completed);
  print_result_row("Benchmark duration (s):", duration);
  print_result_count("Total input tokens:", input_tokens);
  print_result_count("Total generated tokens:", output_tokens);
  print_result_row("Request throughput (req/s):", completed / duration);
  print_result_row("Output token throughput (tok/s):", static_cast<double>(output_tokens) / duration);
  print_result_row("Total Token throughput (tok/s):", static_cast<double>(input_tokens + output_tokens) / duration);
  print_result_count("Engine steps:", static_cast<long long>(stats.steps));
  print_result_count("Preemptions:", static_cast<long long>(stats.preemptions));
  print_result_row("Prefix cache hit rate (%):",
                   stats.prefix_cache_queries > 0 ? 100.0 * static_cast<double>(stats.prefix_cache_hits) /
                                                        static_cast<double>(stats.prefix_cache_queries)
                                                  : 0.0);
  print_result_row("Peak cache usage (%):", 100 * peak_cache_usage);
  print_latency_section("Time to First Token", "TTFT", s_ttft);
  print_latency_section("Time per Output Token (excl. 1st token)", "TPOT", s_tpot);
  print_latency_section("Inter-token Latency", "ITL", s_itl);
  print_latency_section("End-to-end Latency", "E2EL", s_e2e);
  std::printf("%s\n", std::string(50, '=').c_str());
}

}  // namespace

void add_bench_throughput_command(CLI::App& bench) {
  auto opts = std::make_shared<ThroughputOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "throughput",
      "Serving throughput through the engine: random prompts submitted at once, continuous batching; prints "
      "requests/s, tokens/s and TTFT / TPOT / ITL mean, median and p99 (as vLLM's serving benchmark)");
  add_model_options(cmd, opts->source);
  add_device_option(cmd, opts->device);
  add_gpu_options(cmd, opts->gpu);
  cmd->add_option("--threads", opts->threads, "CPU threads (0: all cores)")->check(non_negative_number());
  cmd->add_option("--num-prompts", opts->num_prompts, "Requests")->check(positive_number())->default_str("32");
  cmd->add_option("--input-len", opts->input_len, "Prompt tokens (random ids)")->check(positive_number())->default_str("128");
  cmd->add_option("--prefix-len", opts->prefix_len,
                  "Random tokens every prompt starts with, before its --input-len own (vLLM's --random-prefix-len)")
      ->check(non_negative_number())
      ->default_str("0");
  cmd->add_option("--output-len", opts->output_len, "Tokens to generate per request (end-of-sequence ignored)")
      ->check(positive_number())
      ->default_str("32");
  cmd->add_option("--range-ratio", opts->range_ratio,
                  "Lengths drawn uniformly from [len * (1 - r), len * (1 + r)]")
      ->check(number_from_to(0.0, 1.0))
      ->default_str("0");
  cmd->add_option("--seed", opts->seed, "Seed of the prompts and of the requests' sampling")->default_str("0");
  cmd->add_option("--temperature", opts->temperature, "Sampling temperature (0: greedy)")
      ->check(non_negative_number())
      ->default_str("0");
  cmd->add_option("--max-num-seqs", opts->engine.max_num_seqs, "Sequences in one engine step")
      ->check(positive_number())
      ->default_str("64");
  cmd->add_option("--max-num-batched-tokens", opts->engine.max_num_batched_tokens,
                  "Tokens in one step (default: 8192 on a GPU of 70 GiB or more, as vLLM's server on H100-class GPUs; else 2048)")
      ->check(positive_number());
  add_long_prefill_option(cmd, opts->engine);
  cmd->add_option("--max-model-len", opts->engine.max_model_len,
                  "Longest prompt + output (0: the model's max_position_embeddings)")
      ->check(non_negative_number())
      ->default_str("0");
  cmd->add_option("--block-size", opts->engine.block_size, "Tokens per cache block (accounting)")
      ->check(positive_number())
      ->default_str("64");
  cmd->add_option("--num-cache-blocks", opts->engine.num_cache_blocks,
                  "Cache blocks, over --kv-cache-memory-bytes and --gpu-memory-utilization (0: sized by those, or "
                  "for --max-num-seqs requests of --max-model-len); fewer makes the scheduler preempt")
      ->check(non_negative_number())
      ->default_str("0");
  add_cache_options(cmd, opts->cache);
  cmd->add_flag("--exact-math", opts->engine.exact_math, "No FP8/FP4 activation quantisation or QAT rounding");
  cmd->add_flag("--json", opts->json, "Print the results as one JSON object instead of the table");
  cmd->callback([opts] { run_bench_throughput(*opts); });
}

}  // namespace dsv4::tools
