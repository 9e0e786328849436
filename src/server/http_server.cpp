// OpenAiServer's routes on cpp-httplib; see http_server.h. A generation request goes: parse and
// check the body (openai_request.h), render and tokenize the prompt, check its length, take an
// open-request slot (429 when none is left), submit to the engine, then turn the engine's chunks
// into one JSON answer or a stream of events (openai_response.h). Chat text goes through the
// streaming completion parser in both cases, so both give the same message.
#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"
#include "server/completion_stream.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace dsv4::server {
namespace {

using nlohmann::ordered_json;

constexpr auto kChunkWait = std::chrono::milliseconds(100);
// A streamed request of several choices waits this long on one before it polls the others again.
constexpr auto kChoiceWait = std::chrono::milliseconds(5);

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_json(httplib::Response& res, int status, const ordered_json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  send_json(res, error.status(), error.to_json());
}

// OpenAI's finish_reason for the engine's.
std::string_view finish_word(FinishReason reason, bool made_tool_calls) {
  switch (reason) {
    case FinishReason::kStop: return made_tool_calls ? "tool_calls" : "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

void append_delta(CompletionDelta& into, const CompletionDelta& more) {
  into.reasoning += more.reasoning;
  into.content += more.content;
  for (const ToolCallDelta& call : more.tool_calls) {
    if (!into.tool_calls.empty() && into.tool_calls.back().index == call.index && !call.name) {
      into.tool_calls.back().arguments += call.arguments;
    } else {
      into.tool_calls.push_back(call);
    }
  }
}

// A chat answer as it streams: the parser, the ids of the calls it has started, and the sum.
class ChatAnswer {
 public:
  explicit ChatAnswer(const ChatPrompt& prompt)
      : parser_(prompt.mode, prompt.parse_tool_calls) {
    if (prompt.mode == ThinkingMode::kThinking) whole_.reasoning = "";
  }
  CompletionDelta feed(std::string_view text) { return record(parser_.feed(text)); }
  CompletionDelta finish() { return record(parser_.finish()); }
  const ParsedCompletion& whole() const { return whole_; }
  const std::vector<std::string>& tool_call_ids() const { return ids_; }

 private:
  CompletionDelta record(CompletionDelta delta) {
    while (ids_.size() < parser_.tool_calls_started()) ids_.push_back(random_id("call_"));
    whole_.add(delta);
    return delta;
  }
  CompletionStreamParser parser_;
  ParsedCompletion whole_;
  std::vector<std::string> ids_;
};

// The "Bearer KEY" of an Authorization header, or "".
std::string bearer_token(const httplib::Request& req) {
  const std::string value = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  return value.starts_with(kBearer) ? value.substr(kBearer.size()) : std::string();
}

bool same_secret(std::string_view given, std::string_view expected) {
  // Compares every byte whatever the first difference, so timing tells nothing.
  unsigned char differ = given.size() != expected.size();
  for (size_t i = 0; i < given.size() && i < expected.size(); ++i) {
    differ |= static_cast<unsigned char>(given[i] ^ expected[i]);
  }
  return differ == 0;
}

}  // namespace

class OpenAiServer::Impl {
 public:
  Impl(ServerOptions options, std::shared_ptr<const Tokenizer> tokenizer)
      : options_(std::move(options)),
        tokenizer_(std::move(tokenizer)),
        metrics_(options_.served_model_name) {
    if (!tokenizer_) throw UsageError("OpenAiServer needs a tokenizer");
    http_.new_task_queue = [threads = static_cast<size_t>(options_.max_open_requests) + 16] {
      return new httplib::ThreadPool(threads);
    };
    http_.set_payload_max_length(options_.max_body_bytes);
    // Requests without a body are refused here; a POST's key is checked in its route
    // (route_post), after httplib has read the body: answered before that, the unread body stayed
    // on a kept-alive connection and was read as the next request (a 400 instead of the 401).
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.method == "POST" || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, invalid_api_key());
      return httplib::Server::HandlerResponse::Handled;
    });
    if (options_.access_log)
      http_.set_logger([log = options_.access_log](const httplib::Request& req, const httplib::Response& res) {
        log(req.remote_addr + ":" + std::to_string(req.remote_port) + " \"" + req.method + " " + req.path + " " +
            req.version + "\" " + std::to_string(res.status));
      });
    // Statuses httplib sets itself (no route, body too large, unreadable request) get an
    // OpenAI error body too.
    http_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      switch (res.status) {
        case 404: send_error(res, route_not_found(req.method, req.path)); break;
        case 413: send_error(res, body_too_large(options_.max_body_bytes)); break;
        default:
          send_error(res, ApiError(res.status, "The request could not be read.",
                                   res.status < 500 ? "invalid_request_error" : "server_error"));
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    route_post("/v1/chat/completions", &Impl::chat_completions);
    route_post("/v1/completions", &Impl::completions);
    route_post("/tokenize", &Impl::tokenize);
    route_post("/detokenize", &Impl::detokenize);
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      guarded(res, [&] {
        send_json(res, 200,
                  model_list_json(options_.served_model_name, started_, ready().max_model_len()));
      });
    });
    // /ping is vLLM's (SageMaker's) name for the same probe, by GET or POST.
    const auto health = [this](const httplib::Request&, httplib::Response& res) { answer_health(res); };
    http_.Get("/health", health);
    http_.Get("/ping", health);
    http_.Post("/ping", health);
    http_.Get("/version", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"version", DSV4_VERSION}});
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      ServingEngine* engine = engine_;
      res.set_content(metrics_.render(engine ? engine->stats() : EngineStats{}),
                      "text/plain; version=0.0.4");
    });
  }

  ~Impl() { stop(); }

  int start() {
    const int port = options_.port == 0 ? http_.bind_to_any_port(options_.host)
                                        : (http_.bind_to_port(options_.host, options_.port)
                                               ? options_.port
                                               : -1);
    if (port < 0) {
      throw IoError("cannot listen on " + options_.host + ":" + std::to_string(options_.port));
    }
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    return port;
  }

  void set_engine(ServingEngine& engine) { engine_ = &engine; }

  int64_t drain(std::chrono::milliseconds timeout) {
    draining_ = true;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (open_ > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return open_;
  }

  void stop() {
    http_.stop();
    if (thread_.joinable()) thread_.join();
  }

  int64_t open_requests() const { return open_; }

 private:
  // Holds one of the max_open_requests slots while a generation request is open.
  class OpenSlot {
   public:
    explicit OpenSlot(std::atomic<int64_t>& open) : open_(&open) {}
    OpenSlot(OpenSlot&& other) noexcept : open_(std::exchange(other.open_, nullptr)) {}
    OpenSlot& operator=(OpenSlot&&) = delete;
    ~OpenSlot() {
      if (open_) --*open_;
    }

   private:
    std::atomic<int64_t>* open_;
  };

  // A submitted request: its stream and its slot, released together.
  struct Running {
    std::unique_ptr<GenerationStream> stream;
    OpenSlot slot;
    ResponseHeader header;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
  };

  // One of a request's choices (n per prompt): its engine stream and what it has produced.
  struct Choice {
    Running running;
    std::optional<OutputChunk> last;  // the chunk with the finish reason, once it has come
    bool first_of_prompt = true;      // the prompt's tokens count once, with its first choice
  };

  // The request's usage once every choice has finished: each prompt once, every choice's tokens,
  // the cached tokens of each prompt's first choice.
  static Usage usage_of(std::span<const Choice> choices) {
    Usage usage;
    for (const Choice& c : choices) {
      usage.completion_tokens += c.running.completion_tokens;
      if (!c.first_of_prompt) continue;
      usage.prompt_tokens += c.running.prompt_tokens;
      if (c.last->metrics) usage.cached_tokens += c.last->metrics->cached_tokens;
    }
    return usage;
  }

  using Route = void (Impl::*)(const httplib::Request&, httplib::Response&);

  void route_post(const char* path, Route route) {
    http_.Post(path, [this, route](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req)) return send_error(res, invalid_api_key());
      guarded(res, [&] { (this->*route)(req, res); });
    });
  }

  // 200 with no body when requests are served; 503 while the model loads or the server drains,
  // and once the engine cannot serve (Engine::fault), as vLLM answers for a dead engine.
  void answer_health(httplib::Response& res) const {
    const ServingEngine* engine = engine_;
    if (draining_) {
      send_error(res, not_ready("The server is shutting down."));
    } else if (!engine) {
      send_error(res, not_ready("The model is loading."));
    } else if (const std::optional<std::string> why = engine->fault()) {
      send_error(res, not_ready("The engine cannot serve: " + *why));
    } else {
      res.status = 200;
    }
  }

  // Every route but the health probes (/health, /ping) needs the key when one is set: a load
  // balancer's probe carries none.
  bool authorized(const httplib::Request& req) const {
    return options_.api_key.empty() || req.path == "/health" || req.path == "/ping" ||
           same_secret(bearer_token(req), options_.api_key);
  }

  // Runs a handler, turning whatever it throws into an error response.
  template <typename Handler>
  void guarded(httplib::Response& res, Handler&& handler) {
    try {
      handler();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const UsageError& e) {
      send_error(res, invalid_request(e.what()));
    } catch (const FormatError& e) {
      send_error(res, invalid_request(e.what()));
    } catch (const CommError& e) {  // the engine cannot serve (Engine::fault)
      send_error(res, not_ready(e.what()));
    } catch (const std::exception& e) {
      send_error(res, internal_error(e.what()));
    }
  }

  ServingEngine& ready() const {
    ServingEngine* engine = engine_;
    if (!engine) throw not_ready("The model is loading.");
    return *engine;
  }

  void check_model(const std::optional<std::string>& model) const {
    if (model && *model != options_.served_model_name) throw model_not_found(*model);
  }

  // vLLM's truncate_prompt_tokens: the prompt's last k tokens (all of them when it has no more);
  // -1 is the model's length, and more than that is refused, as vLLM does (the message is its).
  static std::vector<int32_t> truncated(std::vector<int32_t> ids, const GenerationOptions& o, int64_t max_model_len) {
    if (!o.truncate_prompt_tokens) return ids;
    const int64_t keep = *o.truncate_prompt_tokens == -1 ? max_model_len : *o.truncate_prompt_tokens;
    if (keep > max_model_len) {
      throw invalid_request("truncate_prompt_tokens value (" + std::to_string(keep) + ") is greater than "
                            "max_model_len (" + std::to_string(max_model_len) + "). Please, select a smaller "
                            "truncation size.",
                            "truncate_prompt_tokens");
    }
    if (static_cast<int64_t>(ids.size()) > keep) ids.erase(ids.begin(), ids.end() - keep);
    return ids;
  }

  // The prompt plus the answer must fit the model (the message is vLLM's).
  void check_length(int64_t prompt_tokens, const GenerationOptions& o, const char* prompt_param,
                    int64_t max_model_len) const {
    const int64_t asked = prompt_tokens + o.max_tokens.value_or(0);
    if (prompt_tokens >= max_model_len || asked > max_model_len) {
      std::string message = "This model's maximum context length is " +
                            std::to_string(max_model_len) + " tokens. However, you requested " +
                            std::to_string(asked) + " tokens (" + std::to_string(prompt_tokens) +
                            " in the prompt, " + std::to_string(o.max_tokens.value_or(0)) +
                            " in the completion). Please reduce the length of the prompt or "
                            "completion.";
      throw invalid_request(std::move(message),
                            prompt_tokens >= max_model_len ? prompt_param : "max_tokens",
                            "context_length_exceeded");
    }
  }

  // vLLM's bad_words as the token sequences SamplingParams::bad_words_ids bans, as vLLM builds them:
  // each word with its leading whitespace stripped (ASCII whitespace here; Python's lstrip also
  // strips Unicode spaces, which a word rarely starts with), then " " + that word, since a byte-level
  // BPE tokenizer such as DeepSeek-V4's spells a word after a space with other tokens than at the
  // start of a text. The prefixed variant is kept only when it has as many tokens as the plain one
  // and another first token; otherwise it is the plain ids behind a space token, which the plain
  // sequence bans already. A word left with no token (only whitespace) is refused.
  std::vector<std::vector<int32_t>> bad_words_ids(const std::vector<std::string>& words) const {
    std::vector<std::vector<int32_t>> sequences;
    for (size_t i = 0; i < words.size(); ++i) {
      const std::string_view word = words[i];
      const size_t start = word.find_first_not_of(" \t\n\v\f\r");
      if (start == std::string_view::npos) {
        const std::string at = "bad_words[" + std::to_string(i) + "]";
        throw invalid_request("Invalid value for '" + at + "': " + ordered_json(words[i]).dump() +
                                  " is only whitespace, which vLLM strips, leaving no token to ban.",
                              at, "invalid_value");
      }
      const std::string_view stripped = word.substr(start);
      std::vector<int32_t> plain = tokenizer_->encode(stripped);
      std::vector<int32_t> prefixed = tokenizer_->encode(" " + std::string(stripped));
      const bool distinct = prefixed.size() == plain.size() && prefixed.front() != plain.front();
      sequences.push_back(std::move(plain));
      if (distinct) sequences.push_back(std::move(prefixed));
    }
    return sequences;
  }

  // The o.n choices of each prompt, each an engine request of its own (an open request each),
  // prompt by prompt. A seeded request's choice i (counted over all prompts) draws with seed + i, so
  // the choices differ and each is reproducible.
  std::vector<Choice> submit(std::span<const std::vector<int32_t>> prompts, const GenerationOptions& o,
                             OutputFormat format, std::string_view id_prefix,
                             const std::shared_ptr<const JsonSchema>& json_schema = nullptr) {
    if (draining_) throw not_ready("The server is shutting down.");
    const ResponseHeader header{random_id(id_prefix), unix_seconds(), options_.served_model_name};
    const std::vector<std::vector<int32_t>> bad_words = bad_words_ids(o.bad_words);
    std::vector<Choice> choices;
    for (const std::vector<int32_t>& prompt : prompts) {
      for (int32_t j = 0; j < o.n; ++j) {
        GenerationOptions choice = o;
        if (o.seed) choice.seed = *o.seed + static_cast<uint64_t>(choices.size());
        choices.push_back({submit_one(prompt, choice, bad_words, format, json_schema, header), std::nullopt, j == 0});
      }
    }
    return choices;
  }

  Running submit_one(const std::vector<int32_t>& prompt, const GenerationOptions& o,
                     const std::vector<std::vector<int32_t>>& bad_words_ids, OutputFormat format,
                     const std::shared_ptr<const JsonSchema>& json_schema, const ResponseHeader& header) {
    ServingEngine& engine = ready();
    if (open_.fetch_add(1) >= options_.max_open_requests) {
      --open_;
      throw too_many_requests("Too many requests are open (" +
                              std::to_string(options_.max_open_requests) +
                              "); retry when some have finished.");
    }
    OpenSlot slot(open_);
    GenerateRequest request;
    request.prompt = prompt;
    SamplingParams& s = request.sampling;
    s.temperature = o.temperature;
    s.top_p = o.top_p;
    s.top_k = o.top_k;
    s.min_p = o.min_p;
    s.seed = o.seed;
    s.presence_penalty = o.presence_penalty;
    s.frequency_penalty = o.frequency_penalty;
    s.repetition_penalty = o.repetition_penalty;
    s.logit_bias = o.logit_bias;
    s.allowed_token_ids = o.allowed_token_ids;
    s.bad_words_ids = bad_words_ids;
    s.logprobs = o.logprobs;
    s.top_logprobs = o.top_logprobs;
    request.stop.max_tokens = o.max_tokens;
    request.stop.stop_token_ids = o.stop_token_ids;
    request.stop.stop_strings = o.stop;
    request.stop.ignore_eos = o.ignore_eos;
    request.stop.min_tokens = o.min_tokens;
    request.stop.include_stop_string = o.include_stop_str_in_output;
    request.format = format;
    request.json_schema = json_schema;
    if (format == OutputFormat::kChoice) request.choices = o.choices;
    if (format == OutputFormat::kRegex) request.regex = o.regex;
    request.prompt_logprobs = o.prompt_logprobs;
    const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
    std::unique_ptr<GenerationStream> stream = engine.submit(std::move(request));
    return Running{std::move(stream), std::move(slot), header, prompt_tokens, 0};
  }

  std::string token_text(int32_t id) const {
    try {
      return std::string(tokenizer_->token_bytes(id));
    } catch (const UsageError&) {
      return std::string();
    }
  }

  std::vector<TokenLogprobInfo> logprobs_of(std::span<const GeneratedToken> tokens) const {
    std::vector<TokenLogprobInfo> infos;
    for (const GeneratedToken& token : tokens) {
      TokenLogprobInfo info{token_text(token.id), token.logprob, {}};
      for (const TokenLogprob& top : token.top) info.top.emplace_back(token_text(top.id), top.logprob);
      infos.push_back(std::move(info));
    }
    return infos;
  }
  std::vector<TokenLogprobInfo> logprobs_of(const OutputChunk& chunk) const { return logprobs_of(chunk.tokens); }

  // An echoed prompt's logprobs: its first token with none, then those of the first chunk, with
  // `top` alternatives each (the engine may have computed more for prompt_logprobs).
  std::vector<TokenLogprobInfo> prompt_logprobs_of(const std::vector<int32_t>& prompt, const OutputChunk& first,
                                                   int32_t top) const {
    std::vector<TokenLogprobInfo> infos = {{token_text(prompt.front()), 0.0f, {}, true}};
    for (TokenLogprobInfo& info : logprobs_of(first.prompt_logprobs)) {
      if (info.top.size() > static_cast<size_t>(top)) info.top.resize(static_cast<size_t>(top));
      infos.push_back(std::move(info));
    }
    return infos;
  }

  // vLLM's prompt_logprobs of a request's first chunk, `count` alternatives per prompt token.
  ordered_json vllm_prompt_logprobs(const OutputChunk& first, int32_t count) const {
    std::vector<std::vector<PromptTokenLogprob>> positions;
    for (const GeneratedToken& token : first.prompt_logprobs) {
      std::vector<PromptTokenLogprob>& entries = positions.emplace_back();
      entries.push_back({token.id, token_text(token.id), token.logprob, token.rank});
      for (size_t i = 0; i < token.top.size() && i < static_cast<size_t>(count); ++i) {
        const TokenLogprob& top = token.top[i];
        if (top.id != token.id)
          entries.push_back({top.id, token_text(top.id), top.logprob, static_cast<int32_t>(i + 1)});
      }
    }
    return prompt_logprobs_json(positions);
  }

  // The next chunk; waits as long as it takes (the non-streamed routes).
  static OutputChunk next_chunk(GenerationStream& stream) {
    while (true) {
      if (std::optional<OutputChunk> chunk = stream.next_for(kChunkWait)) return std::move(*chunk);
    }
  }

  void finished(const OutputChunk& last, std::string_view word) {
    if (last.metrics) metrics_.record_finished(*last.metrics, word);
  }

  // ---- /v1/chat/completions ------------------------------------------------------------------

  // A streamed answer's state, shared by httplib's content provider calls: the choices and, per
  // choice, what the route's events need (a chat answer's parser, a text's offset).
  template <typename PerChoice>
  struct StreamState {
    std::vector<Choice> choices;
    std::vector<PerChoice> parts;
    GenerationOptions options;
    bool started = false;
    size_t next = 0;  // the choice polled first (round robin over the open ones)
  };
  struct TextPart {
    size_t text_offset = 0;
    // echo: the prompt's text and ids, sent before the choice's first tokens.
    std::string echo;
    const std::vector<int32_t>* prompt = nullptr;
    bool echoed = false;
  };

  void chat_completions(const httplib::Request& req, httplib::Response& res) {
    const ChatCompletionRequest request = parse_chat_completion_request(parse_request_body(req.body), options_.sampling_defaults);
    check_model(request.model);
    const ChatPrompt prompt = render_chat_prompt(request);
    const std::vector<int32_t> ids =
        truncated(tokenizer_->encode(prompt.text), request.generation, ready().max_model_len());
    check_length(static_cast<int64_t>(ids.size()), request.generation, "messages",
                 ready().max_model_len());
    const OutputFormat format = request.response_format ? OutputFormat::kJsonObject
                                : request.generation.choices ? OutputFormat::kChoice
                                : request.generation.regex   ? OutputFormat::kRegex
                                                             : OutputFormat::kText;
    std::vector<Choice> choices = submit(std::span(&ids, 1), request.generation, format, "chatcmpl-", request.json_schema);
    std::vector<ChatAnswer> answers;
    for (size_t i = 0; i < choices.size(); ++i) {
      answers.emplace_back(prompt);
      answers.back().feed(prompt.tool_call_prefill);
    }
    if (request.generation.stream) {
      auto state = std::make_shared<StreamState<ChatAnswer>>(
          StreamState<ChatAnswer>{std::move(choices), std::move(answers), request.generation});
      stream_events(res, state, "chat.completion.chunk",
                    [this](StreamState<ChatAnswer>& s, size_t i, const OutputChunk* chunk) {
                      return chat_events(s, i, chunk);
                    });
      return;
    }
    ordered_json json_choices = ordered_json::array();
    std::optional<ordered_json> prompt_logprobs;  // vLLM's, of the prompt all choices share
    for (size_t i = 0; i < choices.size(); ++i) {
      Choice& choice = choices[i];
      ChatAnswer& answer = answers[i];
      std::vector<TokenLogprobInfo> logprobs;
      while (!choice.last) {
        OutputChunk chunk = next_chunk(*choice.running.stream);
        choice.running.completion_tokens += static_cast<int64_t>(chunk.tokens.size());
        if (request.generation.prompt_logprobs && !prompt_logprobs && !chunk.tokens.empty())
          prompt_logprobs = vllm_prompt_logprobs(chunk, *request.generation.prompt_logprobs);
        if (request.generation.logprobs) {
          for (TokenLogprobInfo& info : logprobs_of(chunk)) logprobs.push_back(std::move(info));
        }
        answer.feed(chunk.text);
        if (chunk.finish) choice.last = std::move(chunk);
      }
      answer.finish();
      const std::string_view word = finish_word(*choice.last->finish, !answer.whole().tool_calls.empty());
      finished(*choice.last, word);
      if (*choice.last->finish == FinishReason::kError) throw internal_error(choice.last->error);
      json_choices.push_back(chat_choice_json(
          static_cast<int64_t>(i), answer.whole(), answer.tool_call_ids(), word,
          request.generation.logprobs ? std::optional(chat_logprobs_json(logprobs)) : std::nullopt));
    }
    ordered_json body = chat_completion_json(choices.front().running.header, std::move(json_choices), usage_of(choices));
    if (prompt_logprobs) body["prompt_logprobs"] = std::move(*prompt_logprobs);
    send_json(res, 200, body);
  }

  // Choice i's events for one engine chunk (or, with none, its opening role chunk); its last
  // chunk's events end with the finish_reason chunk (or an error event).
  std::string chat_events(StreamState<ChatAnswer>& s, size_t i, const OutputChunk* chunk) {
    const ResponseHeader& header = s.choices[i].running.header;
    const bool usage = s.options.include_usage;
    const auto index = static_cast<int64_t>(i);
    ChatAnswer& answer = s.parts[i];
    std::string events;
    if (!chunk) {
      events += sse_event(chat_chunk_json(header, index, chat_delta_json({}, true, {}), std::nullopt,
                                          std::nullopt, usage));
      return events;
    }
    s.choices[i].running.completion_tokens += static_cast<int64_t>(chunk->tokens.size());
    CompletionDelta delta = answer.feed(chunk->text);
    if (chunk->finish) append_delta(delta, answer.finish());
    std::optional<ordered_json> logprobs;
    if (s.options.logprobs && !chunk->tokens.empty()) {
      logprobs = chat_logprobs_json(logprobs_of(*chunk));
    }
    if (!delta.empty() || logprobs) {
      events += sse_event(chat_chunk_json(
          header, index, chat_delta_json(delta, false, answer.tool_call_ids()), std::nullopt,
          logprobs, usage));
    }
    if (chunk->finish) {
      const std::string_view word = finish_word(*chunk->finish, !answer.whole().tool_calls.empty());
      finished(*chunk, word);
      events += *chunk->finish == FinishReason::kError
                    ? sse_event(internal_error(chunk->error).to_json())
                    : sse_event(chat_chunk_json(header, index, ordered_json::object(), word, std::nullopt, usage));
    }
    return events;
  }

  // Streams `state` as server-sent events: `events(state, i, nullptr)` for every choice first,
  // then `events(state, i, &chunk)` per engine chunk of choice i, then (with include_usage) the
  // usage chunk and [DONE] once every choice has finished. A choice that fails ends the stream
  // and cancels the others; a client that goes away cancels them all.
  template <typename PerChoice, typename Events>
  void stream_events(httplib::Response& res, std::shared_ptr<StreamState<PerChoice>> state, std::string_view object,
                     Events events) {
    res.set_header("Cache-Control", "no-cache");
    const auto cancel_all = [](StreamState<PerChoice>& s) {
      for (Choice& c : s.choices) c.running.stream->cancel();
    };
    res.set_chunked_content_provider(
        "text/event-stream",
        [state, events, object = std::string(object), cancel_all](size_t, httplib::DataSink& sink) {
          StreamState<PerChoice>& s = *state;
          const auto write = [&](const std::string& text) {
            if (text.empty() || sink.write(text.data(), text.size())) return true;
            cancel_all(s);
            return false;
          };
          if (!s.started) {
            s.started = true;
            std::string opening;
            for (size_t i = 0; i < s.choices.size(); ++i) opening += events(s, i, nullptr);
            return write(opening);
          }
          if (!sink.is_writable()) {
            cancel_all(s);
            return false;
          }
          // The next open choice with a chunk ready; with none, wait on one for a while.
          const size_t n = s.choices.size();
          std::optional<OutputChunk> chunk;
          size_t at = 0;
          for (size_t k = 0; k < n && !chunk; ++k) {
            at = (s.next + k) % n;
            if (!s.choices[at].last) chunk = s.choices[at].running.stream->next_for(std::chrono::milliseconds(0));
          }
          if (!chunk) {
            for (size_t k = 0; k < n; ++k) {
              at = (s.next + k) % n;
              if (!s.choices[at].last) break;
            }
            chunk = s.choices[at].running.stream->next_for(n == 1 ? kChunkWait : kChoiceWait);
          }
          if (!chunk) return true;
          s.next = (at + 1) % n;
          std::string text = events(s, at, &*chunk);
          const bool failed = chunk->finish && *chunk->finish == FinishReason::kError;
          if (chunk->finish) s.choices[at].last = std::move(*chunk);
          const bool all_done = std::all_of(s.choices.begin(), s.choices.end(), [](const Choice& c) { return c.last.has_value(); });
          if (failed) cancel_all(s);
          if (failed || all_done) {
            if (s.options.include_usage && all_done)
              text += sse_event(usage_chunk_json(s.choices.front().running.header, object, usage_of(s.choices)));
            text += kSseDone;
          }
          if (!write(text)) return false;
          if (failed || all_done) sink.done();
          return true;
        },
        [state, cancel_all](bool success) {
          if (!success) cancel_all(*state);
        });
  }

  // ---- /v1/completions -----------------------------------------------------------------------

  void completions(const httplib::Request& req, httplib::Response& res) {
    const CompletionRequest request = parse_completion_request(parse_request_body(req.body), options_.sampling_defaults);
    check_model(request.model);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<bool> cut;  // whether truncate_prompt_tokens dropped some of prompt i
    for (const CompletionPrompt& p : request.prompts) {
      std::vector<int32_t> whole = p.text ? tokenizer_->encode(*p.text) : p.ids;
      prompts.push_back(truncated(whole, request.generation, ready().max_model_len()));
      cut.push_back(prompts.back().size() < whole.size());
      check_length(static_cast<int64_t>(prompts.back().size()), request.generation, "prompt",
                   ready().max_model_len());
    }
    GenerationOptions options = request.generation;
    if (request.echo && options.logprobs)
      options.prompt_logprobs = std::max(options.prompt_logprobs.value_or(0), options.top_logprobs);
    const OutputFormat format = request.json_schema ? OutputFormat::kJsonObject
                                : options.choices   ? OutputFormat::kChoice
                                : options.regex     ? OutputFormat::kRegex
                                                    : OutputFormat::kText;
    std::vector<Choice> choices = submit(prompts, options, format, "cmpl-", request.json_schema);
    // Choice i is of prompt i / n; with echo its text starts with that prompt's.
    std::vector<TextPart> parts(choices.size());
    for (size_t i = 0; i < choices.size(); ++i) {
      const size_t p = i / static_cast<size_t>(options.n);
      if (!request.echo) continue;
      parts[i].prompt = &prompts[p];
      // A truncated prompt echoes what was kept, the tokens its echoed logprobs are of.
      parts[i].echo = request.prompts[p].text && !cut[p] ? *request.prompts[p].text : tokenizer_->decode(prompts[p]);
    }
    if (request.generation.stream) {
      auto state = std::make_shared<StreamState<TextPart>>(
          StreamState<TextPart>{std::move(choices), std::move(parts), request.generation});
      stream_events(res, state, "text_completion",
                    [this](StreamState<TextPart>& s, size_t i, const OutputChunk* chunk) {
                      return text_events(s, i, chunk);
                    });
      return;
    }
    ordered_json json_choices = ordered_json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      Choice& choice = choices[i];
      std::string text = parts[i].echo;
      std::vector<TokenLogprobInfo> logprobs;
      std::optional<ordered_json> prompt_logprobs;  // vLLM's
      while (!choice.last) {
        OutputChunk chunk = next_chunk(*choice.running.stream);
        choice.running.completion_tokens += static_cast<int64_t>(chunk.tokens.size());
        text += chunk.text;
        if (request.generation.prompt_logprobs && !prompt_logprobs && !chunk.tokens.empty())
          prompt_logprobs = vllm_prompt_logprobs(chunk, *request.generation.prompt_logprobs);
        if (request.generation.logprobs) {
          if (parts[i].prompt && !parts[i].echoed && !chunk.tokens.empty()) {
            logprobs = prompt_logprobs_of(*parts[i].prompt, chunk, request.generation.top_logprobs);
            parts[i].echoed = true;
          }
          for (TokenLogprobInfo& info : logprobs_of(chunk)) logprobs.push_back(std::move(info));
        }
        if (chunk.finish) choice.last = std::move(chunk);
      }
      const std::string_view word = finish_word(*choice.last->finish, false);
      finished(*choice.last, word);
      if (*choice.last->finish == FinishReason::kError) throw internal_error(choice.last->error);
      json_choices.push_back(completion_choice_json(
          static_cast<int64_t>(i), text, word,
          request.generation.logprobs ? std::optional(completion_logprobs_json(logprobs, 0)) : std::nullopt));
      if (prompt_logprobs) json_choices.back()["prompt_logprobs"] = std::move(*prompt_logprobs);
    }
    send_json(res, 200, completion_json(choices.front().running.header, std::move(json_choices), usage_of(choices)));
  }

  std::string text_events(StreamState<TextPart>& s, size_t i, const OutputChunk* chunk) {
    if (!chunk) return "";
    const ResponseHeader& header = s.choices[i].running.header;
    const bool usage = s.options.include_usage;
    const auto index = static_cast<int64_t>(i);
    s.choices[i].running.completion_tokens += static_cast<int64_t>(chunk->tokens.size());
    std::string events;
    TextPart& part = s.parts[i];
    if (part.prompt && !part.echoed && !chunk->tokens.empty()) {  // the echoed prompt first
      part.echoed = true;
      std::optional<ordered_json> prompt_logprobs;
      if (s.options.logprobs)
        prompt_logprobs = completion_logprobs_json(prompt_logprobs_of(*part.prompt, *chunk, s.options.top_logprobs), 0);
      events += sse_event(completion_chunk_json(header, index, part.echo, std::nullopt, prompt_logprobs, usage));
      part.text_offset = part.echo.size();
    }
    std::optional<ordered_json> logprobs;
    if (s.options.logprobs && !chunk->tokens.empty()) {
      logprobs = completion_logprobs_json(logprobs_of(*chunk), part.text_offset);
    }
    part.text_offset += chunk->text.size();
    if (!chunk->text.empty() || logprobs) {
      events += sse_event(completion_chunk_json(header, index, chunk->text, std::nullopt, logprobs, usage));
    }
    if (chunk->finish) {
      const std::string_view word = finish_word(*chunk->finish, false);
      finished(*chunk, word);
      events += *chunk->finish == FinishReason::kError
                    ? sse_event(internal_error(chunk->error).to_json())
                    : sse_event(completion_chunk_json(header, index, "", word, std::nullopt, usage));
    }
    return events;
  }

  // ---- /tokenize, /detokenize ----------------------------------------------------------------

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const TokenizeRequest request = parse_tokenize_request(parse_request_body(req.body));
    check_model(request.model);
    const std::string text = request.prompt ? *request.prompt : render_chat_prompt(*request.chat).text;
    const std::vector<int32_t> ids = tokenizer_->encode(text);
    send_json(res, 200,
              {{"count", ids.size()}, {"max_model_len", ready().max_model_len()}, {"tokens", ids}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const DetokenizeRequest request = parse_detokenize_request(parse_request_body(req.body));
    check_model(request.model);
    send_json(res, 200, {{"prompt", tokenizer_->decode(request.tokens)}});
  }

  ServerOptions options_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  ServerMetrics metrics_;
  httplib::Server http_;
  std::thread thread_;
  std::atomic<ServingEngine*> engine_{nullptr};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> open_{0};
  int64_t started_ = unix_seconds();
};

OpenAiServer::OpenAiServer(ServerOptions options, std::shared_ptr<const Tokenizer> tokenizer)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(tokenizer))) {}
OpenAiServer::~OpenAiServer() = default;
int OpenAiServer::start() { return impl_->start(); }
void OpenAiServer::set_engine(ServingEngine& engine) { impl_->set_engine(engine); }
int64_t OpenAiServer::drain(std::chrono::milliseconds timeout) { return impl_->drain(timeout); }
void OpenAiServer::stop() { impl_->stop(); }
int64_t OpenAiServer::open_requests() const { return impl_->open_requests(); }

}  // namespace dsv4::server
