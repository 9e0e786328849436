// `dsv4 generate`: greedy decoding from a prompt, on the CPU reference or the GPU, through the
// serving engine (src/runtime) with one request. The prompt is token ids (`--prompt-ids`, ids
// printed back) or text (`--prompt`, encoded with the model's tokenizer.json, optionally through
// the DeepSeek-V4 chat encoding with `--chat`, and the answer streamed as text).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"
#include "tools/backend.h"
#include "tools/commands.h"
#include "tools/model_source.h"
#include "tools/number_checks.h"
#include "tools/token_ids.h"

namespace dsv4::tools {

namespace {

struct GenerateOptions {
  ModelSource source;
  std::string prompt_ids;
  std::string prompt;          // text; needs a tokenizer
  bool chat = false;           // apply the DeepSeek-V4 chat encoding to the text prompt
  bool thinking = false;       // --chat: thinking mode instead of chat mode
  std::string tokenizer_file;  // default: MODEL/tokenizer.json
  Device device = Device::kCpu;
  GpuOptions gpu;
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

// Greedy decoding through the serving engine, one request: the whole prompt in one step (the
// token budget is the prompt's length), then one token per step up to `max_new_tokens`, stopping
// after the end-of-sequence token unless told to ignore it. on_token sees every new id as soon as
// the engine emits it.
std::vector<int32_t> greedy_decode(const Model& model, Ops& ops, ForwardRunner& runner, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& o, const std::function<void(int32_t)>& on_token,
                                   DecodeStats& stats) {
  EngineConfig config;
  config.runner = &runner;
  config.max_model_len = static_cast<int64_t>(prompt.size()) + o.max_new_tokens;
  config.max_num_seqs = 1;
  config.max_num_batched_tokens = static_cast<int64_t>(prompt.size());
  config.exact_math = o.exact_math;
  Engine engine(model, ops, config);
  GenerateRequest request;
  request.prompt = prompt;
  request.sampling.temperature = 0.0f;
  request.stop.max_tokens = o.max_new_tokens;
  request.stop.ignore_eos = o.ignore_eos;
  RequestHandle handle = engine.submit(std::move(request));
  std::vector<int32_t> out;
  while (!handle.done()) {
    engine.step();
    while (std::optional<OutputChunk> chunk = handle.next_for(std::chrono::milliseconds(0))) {
      for (const GeneratedToken& t : chunk->tokens) {
        out.push_back(t.id);
        on_token(t.id);
      }
      if (chunk->finish && *chunk->finish == FinishReason::kError) throw Error("generate: " + chunk->error);
      if (chunk->metrics) {
        const RequestMetrics& m = *chunk->metrics;
        stats.prompt_tokens = m.prompt_tokens;
        stats.prefill_seconds = m.time_to_first_token_s();
        stats.decoded_tokens = m.completion_tokens - 1;
        stats.decode_seconds = std::chrono::duration<double>(m.finished - m.first_token).count();
      }
      if (handle.done()) break;
    }
  }
  return out;
}

// The prompt's ids and the printer of new ids: ids echo as ids, text prompts stream text.
struct PromptIo {
  std::vector<int32_t> ids;
  std::function<void(int32_t)> print;
  std::function<void()> finish;
};

PromptIo id_prompt(const GenerateOptions& o) {
  auto first = std::make_shared<bool>(true);
  return {parse_token_ids(o.prompt_ids, "--prompt-ids"),
          [o, first](int32_t id) {
            if (o.json) return;  // printed at the end
            std::printf("%s%d", *first ? "" : ",", id);
            std::fflush(stdout);
            *first = false;
          },
          [] {}};
}

PromptIo text_prompt(const GenerateOptions& o, std::shared_ptr<const Tokenizer> tokenizer) {
  std::string text = o.prompt;
  if (o.chat) {
    ChatMessage user;
    user.role = ChatRole::kUser;
    user.content = o.prompt;
    ChatEncodeOptions options;
    options.mode = o.thinking ? ThinkingMode::kThinking : ThinkingMode::kChat;
    text = encode_chat_prompt(std::span<const ChatMessage>(&user, 1), options);
  }
  auto decoder = std::make_shared<StreamDecoder>(*tokenizer);
  return {tokenizer->encode(text),
          [o, decoder, tokenizer](int32_t id) {
            if (o.json) return;
            std::fputs(decoder->next(id).c_str(), stdout);
            std::fflush(stdout);
          },
          [o, decoder] {
            if (!o.json) std::fputs(decoder->flush().c_str(), stdout);
          }};
}

void run_generate(const GenerateOptions& o) {
  if (o.prompt_ids.empty() == o.prompt.empty())
    throw UsageError("generate: give exactly one of --prompt-ids and --prompt");
  std::shared_ptr<const Tokenizer> tokenizer;
  if (!o.prompt.empty()) {
    const std::filesystem::path file =
        o.tokenizer_file.empty() ? std::filesystem::path(o.source.model) / "tokenizer.json" : std::filesystem::path(o.tokenizer_file);
    tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(file));
  }
  PromptIo io = tokenizer ? text_prompt(o, tokenizer) : id_prompt(o);
  if (io.ids.empty()) throw UsageError("generate: the prompt has no tokens");
  const std::unique_ptr<Ops> ops = make_backend(o.device, o.threads, o.gpu, o.exact_math);
  const Model model = load_model(*ops, o.source);
  const int64_t max_length = model.config()->max_position_embeddings;
  if (o.max_new_tokens > max_length - static_cast<int64_t>(io.ids.size()))
    throw UsageError("generate: the prompt's " + std::to_string(io.ids.size()) + " tokens plus --max-new-tokens " +
                     std::to_string(o.max_new_tokens) + " exceed the model's max_position_embeddings (" +
                     std::to_string(max_length) + ")");
  DecodeStats stats;
  const std::unique_ptr<ForwardRunner> runner = make_forward_runner(*ops, o.gpu);
  const std::vector<int32_t> ids = greedy_decode(model, *ops, *runner, io.ids, o, io.print, stats);
  io.finish();
  if (o.json) {
    nlohmann::json j{{"ids", ids}};
    if (tokenizer) j["text"] = tokenizer->decode(ids);
    std::printf("%s", j.dump().c_str());
  }
  std::printf("\n");
  std::fflush(stdout);  // the stats go to stderr, after the answer
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
  CLI::App* cmd = app.add_subcommand("generate", "Greedy decoding from a prompt of token ids or text");
  add_model_options(cmd, opts->source);
  auto* ids = cmd->add_option("--prompt-ids", opts->prompt_ids, "Prompt as comma-separated token ids, e.g. 1,2,3");
  auto* text = cmd->add_option("--prompt", opts->prompt,
                               "Prompt as text, encoded with the model's tokenizer.json; the answer streams as text");
  ids->excludes(text);
  cmd->add_flag("--chat", opts->chat, "Wrap --prompt as a user turn in the DeepSeek-V4 chat encoding")->needs(text);
  cmd->add_flag("--thinking", opts->thinking, "With --chat: thinking mode (<think>) instead of chat mode")
      ->needs(text);
  cmd->add_option("--tokenizer", opts->tokenizer_file, "tokenizer.json to use (default: MODEL/tokenizer.json)")
      ->needs(text);
  add_device_option(cmd, opts->device);
  add_gpu_options(cmd, opts->gpu);
  cmd->add_option("-n,--max-new-tokens", opts->max_new_tokens, "Tokens to generate")->check(positive_number());
  cmd->add_flag("--json", opts->json,
                "Print {\"ids\": [...]} (and \"text\" for a text prompt) at the end instead of streaming");
  cmd->add_flag("--exact-math", opts->exact_math,
                "No FP8/FP4 activation quantisation or QAT rounding; every activation fp32");
  cmd->add_flag("--ignore-eos", opts->ignore_eos, "Keep going after the end-of-sequence token");
  cmd->add_flag("--stats", opts->stats, "Print prefill and decode timings to stderr");
  cmd->add_option("--threads", opts->threads, "CPU threads (0: all cores)")->check(non_negative_number());
  cmd->callback([opts] { run_generate(*opts); });
}

}  // namespace dsv4::tools
