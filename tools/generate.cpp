// `dsv4 generate`: greedy decoding from a prompt of token ids on the CPU reference backend. The
// steps are kept apart (where the prompt's ids come from, the decode loop, how ids are printed)
// so other prompt sources (text, chat) and printers slot in beside the existing ones.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "model/model.h"
#include "tools/commands.h"
#include "tools/token_ids.h"

namespace dsv4::tools {

namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt_ids;
  int64_t max_new_tokens = 32;
  bool json = false;
  bool exact_math = false;
  bool ignore_eos = false;
  bool stats = false;
  int threads = 0;
};

struct DecodeStats {
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  int64_t decoded_tokens = 0;  // forwards of one token after the prefill
  double decode_seconds = 0;
};

int32_t argmax(const std::vector<float>& logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

// Prefills `prompt`, then picks the most likely next token up to `max_new_tokens` times, feeding
// each back one at a time; stops after the end-of-sequence token unless told to ignore it.
// on_token sees every new id as soon as it is chosen.
std::vector<int32_t> greedy_decode(const Model& model, Ops& ops, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& o, const std::function<void(int32_t)>& on_token,
                                   DecodeStats& stats) {
  using Clock = std::chrono::steady_clock;
  const int64_t V = model.config()->vocab_size, eos = model.config()->eos_token_id;
  SequenceCache cache = model.new_sequence(ops, static_cast<int64_t>(prompt.size()) + o.max_new_tokens, o.exact_math);
  std::vector<int32_t> out;
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<int32_t> next = prompt;
  while (static_cast<int64_t>(out.size()) < o.max_new_tokens) {
    const auto start = Clock::now();
    ForwardBatch batch;
    batch.options.exact_math = o.exact_math;
    batch.options.logits = LogitsFor::kLastTokenOfSequence;
    batch.add(cache, next);
    const ForwardResult r = model.forward(ops, batch);
    ops.download(r.logits.view(), TensorView(reinterpret_cast<std::byte*>(logits.data()), DType::kF32, {1, V}));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (out.empty()) {
      stats.prompt_tokens = static_cast<int64_t>(next.size());
      stats.prefill_seconds = seconds;
    } else {
      ++stats.decoded_tokens;
      stats.decode_seconds += seconds;
    }
    const int32_t id = argmax(logits);
    out.push_back(id);
    on_token(id);
    if (id == eos && !o.ignore_eos) break;
    next = {id};
  }
  return out;
}

void run_generate(const GenerateOptions& o) {
  const std::vector<int32_t> prompt = parse_token_ids(o.prompt_ids, "--prompt-ids");
  cpu::CpuOps ops(o.threads);
  const Model model = Model::load(ops, o.model_dir);
  DecodeStats stats;
  bool first = true;
  const std::vector<int32_t> ids = greedy_decode(model, ops, prompt, o, [&](int32_t id) {
    if (o.json) return;  // printed at the end
    std::printf("%s%d", first ? "" : ",", id);
    std::fflush(stdout);
    first = false;
  }, stats);
  if (o.json) std::printf("%s", nlohmann::json{{"ids", ids}}.dump().c_str());
  std::printf("\n");
  if (o.stats)
    std::fprintf(stderr, "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %lld tokens in %.3f s (%.2f tokens/s)\n",
                 static_cast<long long>(stats.prompt_tokens), stats.prefill_seconds,
                 static_cast<double>(stats.prompt_tokens) / stats.prefill_seconds,
                 static_cast<long long>(stats.decoded_tokens), stats.decode_seconds,
                 stats.decoded_tokens > 0 ? static_cast<double>(stats.decoded_tokens) / stats.decode_seconds : 0.0);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Greedy decoding from a prompt of token ids (CPU)");
  cmd->add_option("--model", opts->model_dir, "Model folder (config.json + safetensors)")->required();
  cmd->add_option("--prompt-ids", opts->prompt_ids, "Prompt as comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_option("-n,--max-new-tokens", opts->max_new_tokens, "Tokens to generate")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", opts->json, "Print {\"ids\": [...]} instead of comma-separated ids");
  cmd->add_flag("--exact-math", opts->exact_math,
                "No FP8/FP4 activation quantisation or QAT rounding; every activation fp32");
  cmd->add_flag("--ignore-eos", opts->ignore_eos, "Keep going after the end-of-sequence token");
  cmd->add_flag("--stats", opts->stats, "Print prefill and decode timings to stderr");
  cmd->add_option("--threads", opts->threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->callback([opts] { run_generate(*opts); });
}

}  // namespace dsv4::tools
