// `dsv4 serve`: the OpenAI-compatible HTTP server (src/server) in front of the serving engine
// (src/runtime), with vLLM's flag names. The server listens before the model loads, so /health
// answers 503 until it is ready; SIGTERM or SIGINT drains the open requests and exits.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/stats_log.h"
#include "server/generation_config.h"
#include "server/http_server.h"
#include "server/serving_engine.h"
#include "tokenizer/tokenizer.h"
#include "tools/backend.h"
#include "tools/commands.h"
#include "tools/engine_options.h"
#include "tools/engine_ranks.h"
#include "tools/model_source.h"
#include "tools/number_checks.h"

namespace dsv4::tools {
namespace {

struct ServeOptions {
  ModelSource source;
  std::string tokenizer_file;  // default: MODEL/tokenizer.json
  Device device = Device::kCpu;
  GpuOptions gpu;
  int threads = 0;
  server::ServerOptions server;
  EngineConfig engine;
  CacheOptions cache;
  int64_t max_waiting_requests = 256;
  double drain_seconds = 30;
  bool disable_log_stats = false;
  double log_stats_interval = 10;
  bool disable_access_log = false;
  std::string served_model_name;  // empty: the --model argument, as in vLLM
  std::string generation_config = "auto";
};

// The sampling defaults --generation-config names: "vllm" none; "auto" MODEL/generation_config.json
// if there is one; else FOLDER/generation_config.json, which must exist. Says on stderr what
// they override, as vLLM does.
void apply_generation_config(ServeOptions& o) {
  if (o.generation_config == "vllm") return;
  const bool automatic = o.generation_config == "auto";
  const std::filesystem::path file =
      std::filesystem::path(automatic ? o.source.model : o.generation_config) / "generation_config.json";
  if (automatic && !std::filesystem::exists(file)) return;
  const server::GenerationConfig config = server::load_generation_config(file);
  o.server.sampling_defaults = config.defaults;
  if (config.overridden.empty()) return;
  std::string fields;
  for (const std::string& f : config.overridden) fields += (fields.empty() ? "" : ", ") + f;
  std::fprintf(stderr, "serve: default sampling parameters from %s: %s (--generation-config vllm ignores them)\n",
               file.c_str(), fields.c_str());
}

void run_serve(ServeOptions o) {
  // Every thread made from here on inherits the mask, so only sigwait() below sees the signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const std::filesystem::path tokenizer_file = o.tokenizer_file.empty()
                                                   ? std::filesystem::path(o.source.model) / "tokenizer.json"
                                                   : std::filesystem::path(o.tokenizer_file);
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(tokenizer_file));
  o.server.served_model_name = o.served_model_name.empty() ? o.source.model : o.served_model_name;
  apply_generation_config(o);
  o.server.max_open_requests = o.engine.max_num_seqs + o.max_waiting_requests;
  if (!o.disable_access_log)
    o.server.access_log = [](const std::string& line) { std::fprintf(stderr, "serve: %s\n", line.c_str()); };

  server::OpenAiServer http(o.server, tokenizer);
  const int port = http.start();
  std::fprintf(stderr, "serve: listening on http://%s:%d (model %s loading)\n", o.server.host.c_str(), port,
               o.server.served_model_name.c_str());
  const EngineRanks ranks = make_engine_ranks(o.device, o.threads, o.gpu, false, o.source);
  EngineConfig config = o.engine;
  config.runner = ranks.runner.get();
  apply_cache_options(o.cache, config);
  Engine engine(ranks.ranks(), config, tokenizer);
  print_cache_report("serve", engine);
  const std::string per_rank = engine.data_parallel_size() > 1
                                   ? " (each of " + std::to_string(engine.data_parallel_size()) + " data-parallel ranks)"
                                   : "";
  std::fprintf(stderr, "serve: ready: max_model_len %lld, max_num_seqs %lld, max_num_batched_tokens %lld%s\n",
               static_cast<long long>(engine.config().max_model_len),
               static_cast<long long>(engine.config().max_num_seqs),
               static_cast<long long>(engine.config().max_num_batched_tokens), per_rank.c_str());
  engine.start();
  std::optional<StatsLogger> stats_log;
  if (!o.disable_log_stats)
    stats_log.emplace(engine, std::chrono::milliseconds(static_cast<int64_t>(o.log_stats_interval * 1000)),
                      [](const std::string& line) { std::fprintf(stderr, "serve: %s\n", line.c_str()); });
  const std::unique_ptr<server::ServingEngine> serving = server::serve_engine(engine);
  http.set_engine(*serving);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "serve: %s: draining %lld open requests\n", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
               static_cast<long long>(http.open_requests()));
  const int64_t left = http.drain(std::chrono::milliseconds(static_cast<int64_t>(o.drain_seconds * 1000)));
  if (left > 0) std::fprintf(stderr, "serve: %lld requests still open after the drain; cutting them\n", static_cast<long long>(left));
  http.stop();
  stats_log.reset();
  engine.stop();
  std::fprintf(stderr, "serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (flags as vLLM spells them)");
  add_model_options(cmd, o->source);
  cmd->add_option("--tokenizer", o->tokenizer_file, "tokenizer.json to use (default: MODEL/tokenizer.json)");
  add_device_option(cmd, o->device);
  add_gpu_options(cmd, o->gpu);
  cmd->add_option("--threads", o->threads, "CPU threads (0: all cores)")->check(non_negative_number());
  cmd->add_option("--host", o->server.host, "Address to listen on")->default_str("127.0.0.1");
  cmd->add_option("--port", o->server.port, "Port to listen on (0: any free port)")
      ->check(number_from_to(0, 65535))
      ->default_str("8000");
  cmd->add_option("--api-key", o->server.api_key, "Require \"Authorization: Bearer KEY\" on every route but /health");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "The model name clients use (default: the --model argument)");
  cmd->add_option("--max-model-len", o->engine.max_model_len,
                  "Prompt + output tokens per request (default: the model's max_position_embeddings)")
      ->check(positive_number());
  cmd->add_option("--max-num-seqs", o->engine.max_num_seqs, "Sequences in one step")
      ->check(positive_number())
      ->default_str("64");
  cmd->add_option("--max-num-batched-tokens", o->engine.max_num_batched_tokens,
                  "Tokens in one step (default: 8192 on a GPU of 70 GiB or more, as vLLM's server on H100-class GPUs; else 2048)")
      ->check(positive_number());
  add_long_prefill_option(cmd, o->engine);
  add_cache_options(cmd, o->cache);
  cmd->add_option("--max-waiting-requests", o->max_waiting_requests,
                  "Requests allowed to wait beyond --max-num-seqs; more get 429")
      ->check(non_negative_number())
      ->default_str("256");
  cmd->add_option("--generation-config", o->generation_config,
                  "Sampling defaults for requests that leave them out (temperature, top_p, top_k, min_p, "
                  "repetition_penalty, and max_new_tokens as max_tokens), as vLLM's: auto reads the model folder's "
                  "generation_config.json if it has one, vllm uses OpenAI's defaults, a folder reads its "
                  "generation_config.json")
      ->default_str("auto");
  cmd->add_flag("--disable-log-stats", o->disable_log_stats,
                "No stats line on stderr (by default one every --log-stats-interval seconds while serving, as "
                "vLLM's: prompt and generation throughput, requests running and waiting, KV cache usage, prefix cache "
                "hit rate)");
  cmd->add_option("--log-stats-interval", o->log_stats_interval,
                  "Seconds between stats lines (vLLM's VLLM_LOG_STATS_INTERVAL)")
      ->check(number_from_to(0.01, 86400.0))
      ->default_str("10");
  cmd->add_flag("--disable-access-log,--disable-uvicorn-access-log", o->disable_access_log,
                "No line on stderr per request answered (by default ADDR:PORT \"METHOD PATH HTTP/1.1\" STATUS, as "
                "uvicorn's access log in front of vLLM)");
  cmd->add_option("--drain-seconds", o->drain_seconds, "How long SIGTERM waits for open requests")
      ->check(non_negative_number())
      ->default_str("30");
  cmd->add_option("--max-body-bytes", o->server.max_body_bytes, "Largest request body; larger get 413")
      ->check(positive_number())
      ->default_str(std::to_string(o->server.max_body_bytes));
  cmd->footer(
      "response_format {\"type\": \"json_object\"} constrains decoding: the chat answer is one "
      "syntactically valid JSON object (or its start, when max_tokens cuts it), ending as the object "
      "closes, with thinking off. {\"type\": \"json_schema\"} (and vLLM's guided_json) gets the same, "
      "the object matching its schema in the keywords README lists (the schema is also shown to the "
      "model; one it cannot take is a 400 naming the part); vLLM's guided_choice and guided_regex "
      "constrain the answer too.");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace dsv4::tools
