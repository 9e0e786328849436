// The OpenAI response bodies the server writes: chat.completion and text_completion objects,
// their streamed chunks as server-sent events ("data: {...}\n\n", then "data: [DONE]\n\n"),
// usage, logprobs, and the model list. Plain functions from values to JSON; the server decides
// what goes in them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/completion_stream.h"

namespace dsv4::server {

// The fields every response object of one request shares.
struct ResponseHeader {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model name
};

// A fresh id: `prefix` and 32 random hex digits (OpenAI's ids look the same).
std::string random_id(std::string_view prefix);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache (prompt_tokens_details)
};
nlohmann::ordered_json usage_json(const Usage& usage);

// One generated token's log-probability and the most likely alternatives. Token text is the
// token's raw bytes (a token may hold part of a UTF-8 character).
struct TokenLogprobInfo {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely first
  bool none = false;  // a token with no logprob (an echoed prompt's first): null in the JSON
};

// One position of vLLM's prompt_logprobs: the prompt token, then the most likely tokens other
// than it, each with its logprob and rank (1 + the tokens more likely).
struct PromptTokenLogprob {
  int32_t id = 0;
  std::string token;  // raw bytes, as TokenLogprobInfo's
  float logprob = 0.0f;
  int32_t rank = 0;
};
// vLLM's "prompt_logprobs": null for the first prompt token, then per token
// {"<id>": {"logprob", "rank", "decoded_token"}, ...}, the prompt token first.
nlohmann::ordered_json prompt_logprobs_json(std::span<const std::vector<PromptTokenLogprob>> positions);

// Chat's {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
nlohmann::ordered_json chat_logprobs_json(std::span<const TokenLogprobInfo> tokens);
// Completions' {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"};
// offsets count bytes from `text_offset`.
nlohmann::ordered_json completion_logprobs_json(std::span<const TokenLogprobInfo> tokens,
                                                size_t text_offset);

// The message of a non-streamed chat completion. Reasoning goes out twice, as
// "reasoning_content" (DeepSeek's and vLLM's first name) and "reasoning" (vLLM's newer one),
// since clients read either. `tool_call_ids` has one id per parsed call.
nlohmann::ordered_json chat_message_json(const ParsedCompletion& completion,
                                         std::span<const std::string> tool_call_ids);

// Choice `index` of a chat.completion: its message, logprobs and finish reason.
nlohmann::ordered_json chat_choice_json(int64_t index, const ParsedCompletion& completion,
                                        std::span<const std::string> tool_call_ids,
                                        std::string_view finish_reason,
                                        const std::optional<nlohmann::ordered_json>& logprobs);
// A whole chat.completion object of `choices` (chat_choice_json's).
nlohmann::ordered_json chat_completion_json(const ResponseHeader& header, nlohmann::ordered_json choices,
                                            const Usage& usage);

// Choice `index` of a text_completion, and a whole text_completion object.
nlohmann::ordered_json completion_choice_json(int64_t index, std::string_view text, std::string_view finish_reason,
                                              const std::optional<nlohmann::ordered_json>& logprobs);
nlohmann::ordered_json completion_json(const ResponseHeader& header, nlohmann::ordered_json choices,
                                       const Usage& usage);

// The "delta" of a chat.completion.chunk: role (the first chunk only), reasoning under both
// names, content, tool calls (the first piece of a call carries its id, type and name).
nlohmann::ordered_json chat_delta_json(const CompletionDelta& delta, bool with_role,
                                       std::span<const std::string> tool_call_ids);

// One chat.completion.chunk with one choice, number `index`. With include_usage every chunk has
// "usage": null, as OpenAI's stream does; the last chunk (usage_chunk) has the numbers and no
// choices.
nlohmann::ordered_json chat_chunk_json(const ResponseHeader& header, int64_t index,
                                       nlohmann::ordered_json delta,
                                       std::optional<std::string_view> finish_reason,
                                       const std::optional<nlohmann::ordered_json>& logprobs,
                                       bool include_usage);
nlohmann::ordered_json completion_chunk_json(const ResponseHeader& header, int64_t index, std::string_view text,
                                             std::optional<std::string_view> finish_reason,
                                             const std::optional<nlohmann::ordered_json>& logprobs,
                                             bool include_usage);
nlohmann::ordered_json usage_chunk_json(const ResponseHeader& header, std::string_view object,
                                        const Usage& usage);

// /v1/models: one model.
nlohmann::ordered_json model_list_json(std::string_view model, int64_t created,
                                       int64_t max_model_len);

// JSON text for a response: invalid UTF-8 (a token's partial character) is replaced by U+FFFD
// instead of failing the response.
std::string dump_json(const nlohmann::ordered_json& value);

// One server-sent event carrying `data`, and the stream's last event.
std::string sse_event(const nlohmann::ordered_json& data);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace dsv4::server
