// OpenAI response objects and server-sent events; see openai_response.h.
#include "server/openai_response.h"

#include <random>

#include "tokenizer/utf8.h"

namespace dsv4::server {
namespace {

using nlohmann::ordered_json;

std::string repaired(std::string_view bytes) {
  std::string text;
  utf8::append_repaired(bytes, text);
  return text;
}

ordered_json byte_list(std::string_view bytes) {
  ordered_json list = ordered_json::array();
  for (const char c : bytes) list.push_back(static_cast<unsigned char>(c));
  return list;
}

ordered_json null_or(const std::optional<ordered_json>& value) {
  return value ? *value : ordered_json(nullptr);
}

ordered_json header_json(const ResponseHeader& header, std::string_view object) {
  return {{"id", header.id}, {"object", object}, {"created", header.created},
          {"model", header.model}};
}

ordered_json tool_call_json(const std::string& id, const ParsedToolCall& call) {
  return {{"id", id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int i = 0; i < 32; ++i) id += kHex[generator() % 16];
  return id;
}

ordered_json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

ordered_json chat_logprobs_json(std::span<const TokenLogprobInfo> tokens) {
  ordered_json content = ordered_json::array();
  for (const TokenLogprobInfo& token : tokens) {
    ordered_json top = ordered_json::array();
    for (const auto& [text, logprob] : token.top) {
      top.push_back({{"token", repaired(text)}, {"logprob", logprob}, {"bytes", byte_list(text)}});
    }
    content.push_back({{"token", repaired(token.token)},
                       {"logprob", token.logprob},
                       {"bytes", byte_list(token.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

ordered_json completion_logprobs_json(std::span<const TokenLogprobInfo> tokens,
                                      size_t text_offset) {
  ordered_json texts = ordered_json::array();
  ordered_json logprobs = ordered_json::array();
  ordered_json tops = ordered_json::array();
  ordered_json offsets = ordered_json::array();
  for (const TokenLogprobInfo& token : tokens) {
    texts.push_back(repaired(token.token));
    logprobs.push_back(token.none ? ordered_json(nullptr) : ordered_json(token.logprob));
    ordered_json top = ordered_json::object();
    for (const auto& [text, logprob] : token.top) top[repaired(text)] = logprob;
    tops.push_back(token.none ? ordered_json(nullptr) : std::move(top));
    offsets.push_back(text_offset);
    text_offset += token.token.size();
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

ordered_json prompt_logprobs_json(std::span<const std::vector<PromptTokenLogprob>> positions) {
  ordered_json list = ordered_json::array({nullptr});
  for (const std::vector<PromptTokenLogprob>& position : positions) {
    ordered_json entries = ordered_json::object();
    for (const PromptTokenLogprob& e : position) {
      entries[std::to_string(e.id)] = {{"logprob", e.logprob}, {"rank", e.rank}, {"decoded_token", repaired(e.token)}};
    }
    list.push_back(std::move(entries));
  }
  return list;
}

ordered_json chat_message_json(const ParsedCompletion& completion,
                               std::span<const std::string> tool_call_ids) {
  ordered_json message = {{"role", "assistant"}};
  // OpenAI sends null content for a message that is only tool calls.
  message["content"] = completion.content.empty() && !completion.tool_calls.empty()
                           ? ordered_json(nullptr)
                           : ordered_json(completion.content);
  const ordered_json reasoning =
      completion.reasoning ? ordered_json(*completion.reasoning) : ordered_json(nullptr);
  message["reasoning_content"] = reasoning;
  message["reasoning"] = reasoning;
  if (!completion.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (size_t i = 0; i < completion.tool_calls.size(); ++i) {
      calls.push_back(tool_call_json(tool_call_ids[i], completion.tool_calls[i]));
    }
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

ordered_json chat_choice_json(int64_t index, const ParsedCompletion& completion,
                              std::span<const std::string> tool_call_ids, std::string_view finish_reason,
                              const std::optional<ordered_json>& logprobs) {
  return {{"index", index},
          {"message", chat_message_json(completion, tool_call_ids)},
          {"logprobs", null_or(logprobs)},
          {"finish_reason", finish_reason}};
}

ordered_json chat_completion_json(const ResponseHeader& header, ordered_json choices, const Usage& usage) {
  ordered_json response = header_json(header, "chat.completion");
  response["choices"] = std::move(choices);
  response["usage"] = usage_json(usage);
  return response;
}

ordered_json completion_choice_json(int64_t index, std::string_view text, std::string_view finish_reason,
                                    const std::optional<ordered_json>& logprobs) {
  return {{"index", index}, {"text", text}, {"logprobs", null_or(logprobs)}, {"finish_reason", finish_reason}};
}

ordered_json completion_json(const ResponseHeader& header, ordered_json choices, const Usage& usage) {
  ordered_json response = header_json(header, "text_completion");
  response["choices"] = std::move(choices);
  response["usage"] = usage_json(usage);
  return response;
}

ordered_json chat_delta_json(const CompletionDelta& delta, bool with_role,
                             std::span<const std::string> tool_call_ids) {
  ordered_json json = ordered_json::object();
  if (with_role) json["role"] = "assistant";
  if (!delta.reasoning.empty()) {
    json["reasoning_content"] = delta.reasoning;
    json["reasoning"] = delta.reasoning;
  }
  if (!delta.content.empty() || with_role) json["content"] = delta.content;
  if (!delta.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (const ToolCallDelta& call : delta.tool_calls) {
      ordered_json entry = {{"index", call.index}};
      ordered_json function = ordered_json::object();
      if (call.name) {
        entry["id"] = tool_call_ids[call.index];
        entry["type"] = "function";
        function["name"] = *call.name;
      }
      function["arguments"] = call.arguments;
      entry["function"] = std::move(function);
      calls.push_back(std::move(entry));
    }
    json["tool_calls"] = std::move(calls);
  }
  return json;
}

ordered_json chat_chunk_json(const ResponseHeader& header, int64_t index, ordered_json delta,
                             std::optional<std::string_view> finish_reason,
                             const std::optional<ordered_json>& logprobs, bool include_usage) {
  ordered_json chunk = header_json(header, "chat.completion.chunk");
  chunk["choices"] = ordered_json::array(
      {{{"index", index},
        {"delta", std::move(delta)},
        {"logprobs", null_or(logprobs)},
        {"finish_reason", finish_reason ? ordered_json(*finish_reason) : ordered_json(nullptr)}}});
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

ordered_json completion_chunk_json(const ResponseHeader& header, int64_t index, std::string_view text,
                                   std::optional<std::string_view> finish_reason,
                                   const std::optional<ordered_json>& logprobs,
                                   bool include_usage) {
  ordered_json chunk = header_json(header, "text_completion");
  chunk["choices"] = ordered_json::array(
      {{{"index", index},
        {"text", text},
        {"logprobs", null_or(logprobs)},
        {"finish_reason", finish_reason ? ordered_json(*finish_reason) : ordered_json(nullptr)}}});
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

ordered_json usage_chunk_json(const ResponseHeader& header, std::string_view object,
                              const Usage& usage) {
  ordered_json chunk = header_json(header, object);
  chunk["choices"] = ordered_json::array();
  chunk["usage"] = usage_json(usage);
  return chunk;
}

ordered_json model_list_json(std::string_view model, int64_t created, int64_t max_model_len) {
  return {{"object", "list"},
          {"data", ordered_json::array({{{"id", model},
                                         {"object", "model"},
                                         {"created", created},
                                         {"owned_by", "dsv4"},
                                         {"root", model},
                                         {"max_model_len", max_model_len}}})}};
}

std::string dump_json(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string sse_event(const ordered_json& data) { return "data: " + dump_json(data) + "\n\n"; }

}  // namespace dsv4::server
