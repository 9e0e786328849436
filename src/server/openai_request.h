// The OpenAI requests the server accepts (/v1/chat/completions, /v1/completions, /tokenize,
// /detokenize), parsed from the body's JSON and checked field by field. Every refusal is an
// ApiError (400) naming the field as OpenAI's `param` ("temperature", "messages[2].content",
// "stream_options.include_usage"). Fields OpenAI or vLLM define that do not change the answer
// (user, metadata, ...) and unknown fields are ignored, as both servers do.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/json_schema.h"
#include "sampling/regex_nfa.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4::server {

// Request bodies nested deeper than this are refused before parsing (nothing OpenAI defines
// comes near it; it bounds the recursion of everything that walks the JSON).
inline constexpr int kMaxJsonDepth = 64;

// The body as JSON. Throws ApiError 400 for malformed JSON, nesting beyond kMaxJsonDepth, or a
// body that is not a JSON object.
nlohmann::ordered_json parse_request_body(std::string_view body);

// What a request that leaves a sampling field out gets: OpenAI's defaults, or the model's
// generation_config.json (vLLM's `--generation-config`; server/generation_config.h).
struct SamplingDefaults {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<int64_t> max_tokens;  // max_new_tokens: both endpoints' default when given
};

// How the next tokens are drawn and when generation stops: the fields both endpoints share.
// Ranges as OpenAI documents them (vLLM's where OpenAI has none).
struct GenerationOptions {
  std::optional<int64_t> max_tokens;  // >= 1; none: up to the model length
  float temperature = 1.0f;           // [0, 2]; 0 is greedy
  float top_p = 1.0f;                 // (0, 1]
  int32_t top_k = 0;                  // 0 or -1: off; else >= 1
  float min_p = 0.0f;                 // [0, 1]
  std::optional<uint64_t> seed;       // any 64-bit integer (negative ones wrap)
  float presence_penalty = 0.0f;      // [-2, 2]
  float frequency_penalty = 0.0f;     // [-2, 2]
  float repetition_penalty = 1.0f;    // (0, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> [-100, 100], ids ascending
  // vLLM's extension: only these tokens may be drawn (not empty when given; the engine checks the
  // ids against the vocabulary).
  std::vector<int32_t> allowed_token_ids;
  // vLLM's extension: words that may not be generated (non-empty strings, at most kMaxBadWords);
  // the server tokenizes them into SamplingParams::bad_words_ids.
  std::vector<std::string> bad_words;
  // vLLM's extension: only the prompt's last k tokens are used (for chat, of the encoded
  // conversation), k >= 1; -1 means the model's maximum length, as in vLLM. A k beyond that length
  // is refused when the prompt is tokenized (the length is the engine's).
  std::optional<int64_t> truncate_prompt_tokens;
  std::vector<std::string> stop;      // non-empty strings, at most kMaxStopStrings
  std::vector<int32_t> stop_token_ids;  // vLLM's extension
  bool ignore_eos = false;              // vLLM's extension
  int64_t min_tokens = 0;               // vLLM's extension: no stop before this many tokens
  bool include_stop_str_in_output = false;  // vLLM's extension: a matched stop string stays
  bool logprobs = false;
  int32_t top_logprobs = 0;  // [0, 20]; needs logprobs
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage; needs stream
  int32_t n = 1;               // choices, [1, kMaxChoices]
  // vLLM's extension: every prompt token's logprob (the first's none) with this many of the most
  // likely tokens ([0, kMaxTopLogprobs]); not with stream, as vLLM refuses it there too.
  std::optional<int32_t> prompt_logprobs;
  // vLLM's guided_choice (or structured_outputs.choice): the answer is one of these non-empty
  // strings (at most kMaxGuidedChoices; OutputFormat::kChoice). Not with a JSON output format.
  std::shared_ptr<const std::vector<std::string>> choices;
  // vLLM's guided_regex (or structured_outputs.regex), compiled: the whole answer matches it
  // (OutputFormat::kRegex). Not with a JSON output format or a choice.
  std::shared_ptr<const RegexNfa> regex;
};

inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxGuidedChoices = 1024;
inline constexpr size_t kMaxBadWords = 1024;  // each is one or two token sequences checked per step
inline constexpr int32_t kMaxChoices = 64;
inline constexpr int32_t kMaxTopLogprobs = 20;

// tool_choice: none (tools are not offered), auto (the model may call one), required (it must
// call one), or a named function (it must call that one).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatCompletionRequest {
  std::optional<std::string> model;  // none: the served model
  std::vector<ChatMessage> messages;
  std::vector<nlohmann::ordered_json> tools;  // the "function" objects
  ToolChoice tool_choice = ToolChoice::kNone;  // default: auto with tools, none without
  std::string tool_choice_name;                // kNamed: the function
  // {"type": "json_object"} or {"type": "json_schema", ...} (vLLM's guided_json or
  // structured_outputs.json come as the latter); none for "text" or absent. Either
  // constrains the answer to one JSON object (OutputFormat::kJsonObject); a json_schema's schema
  // is shown to the model in the prompt and enforced as far as json_schema below says. Refused
  // with a required or named tool_choice.
  std::optional<nlohmann::ordered_json> response_format;
  // response_format json_schema's "schema" (or guided_json's), compiled (sampling/json_schema.h
  // says what it enforces); none for json_object or a json_schema without one.
  std::shared_ptr<const JsonSchema> json_schema;
  ThinkingMode thinking = ThinkingMode::kChat;  // chat_template_kwargs.thinking
  ReasoningEffort reasoning_effort = ReasoningEffort::kHigh;  // chat_template_kwargs / top level
  GenerationOptions generation;
};

// Throws ApiError 400 naming the first bad field. Fields left out take `defaults`.
ChatCompletionRequest parse_chat_completion_request(const nlohmann::ordered_json& body,
                                                    const SamplingDefaults& defaults = {});

// One prompt of a completion request: exactly one of the two, a text or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  std::optional<std::string> model;
  // One or more (a list of strings or of id lists); each gets n choices, prompt i's choice j
  // having index i * n + j, as OpenAI's and vLLM's do.
  std::vector<CompletionPrompt> prompts;
  // Each choice's text (and logprobs) start with its prompt's, the first prompt token's logprob
  // null.
  bool echo = false;
  // vLLM's guided_json or structured_outputs.json, compiled: the text is one JSON object it
  // accepts (sampling/json_schema.h), the request ending when the object closes.
  std::shared_ptr<const JsonSchema> json_schema;
  GenerationOptions generation;  // max_tokens defaults to 16 (OpenAI's and vLLM's), or max_new_tokens
};

inline constexpr int64_t kDefaultCompletionMaxTokens = 16;
inline constexpr int32_t kMaxCompletionLogprobs = 5;

// Throws ApiError 400 naming the first bad field; more than kMaxChoices choices in all (prompts
// times n), suffix and best_of > 1 are refused. Fields left out take `defaults` (max_tokens:
// else kDefaultCompletionMaxTokens).
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, const SamplingDefaults& defaults = {});

// POST /tokenize: {"prompt": "..."} or {"messages": [...]} (+ add_special_tokens, tools,
// chat_template_kwargs as for chat), as vLLM's route takes them.
struct TokenizeRequest {
  std::optional<std::string> model;
  std::optional<std::string> prompt;           // text, tokenized as is
  std::optional<ChatCompletionRequest> chat;   // messages, rendered with the chat encoding
};
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body);

// POST /detokenize: {"tokens": [ids]}.
struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(const nlohmann::ordered_json& body);

// The prompt text a chat request renders to: request-level tools (unless tool_choice is none)
// and response_format on the system message, then DeepSeek-V4's encoding. A required or named
// tool choice opens the tool-call block in the prompt (ToolCallPrefill), which makes the model
// write a call; that needs chat mode, so it turns thinking off. A response_format turns thinking
// off too: the constrained answer is the JSON object alone, with no reasoning before it. Throws
// ApiError 400 for messages the encoder cannot render.
struct ChatPrompt {
  std::string text;
  ThinkingMode mode = ThinkingMode::kChat;  // the mode the completion starts in
  bool parse_tool_calls = false;            // tools offered: DSML in the answer is a call
  std::string tool_call_prefill;            // what the prompt ends with beyond the encoding
};
ChatPrompt render_chat_prompt(const ChatCompletionRequest& request);

}  // namespace dsv4::server
