// libFuzzer entry point for the completion parsers: the streaming parser must never throw, must
// give the same result for the text at once and cut in pieces (the cut points come from the
// input), and for valid UTF-8 text (what the engine's decoder gives) every tool call's arguments
// must be a JSON object's text. The strict parser
// (parse_completion) may only throw FormatError.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/completion_stream.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/utf8.h"

namespace {

void require(bool holds, const char* promise) {
  if (holds) return;
  std::fprintf(stderr, "completion parser broke its promise: %s\n", promise);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // Byte 0: mode, tools, and the piece length for the streamed run.
  const dsv4::ThinkingMode mode = data[0] & 1 ? dsv4::ThinkingMode::kThinking : dsv4::ThinkingMode::kChat;
  const bool tools = data[0] & 2;
  const size_t piece = 1 + (data[0] >> 2);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  using namespace dsv4::server;
  const ParsedCompletion whole = parse_completion_text(text, mode, tools);
  CompletionStreamParser parser(mode, tools);
  ParsedCompletion streamed;
  if (mode == dsv4::ThinkingMode::kThinking) streamed.reasoning = "";
  for (size_t at = 0; at < text.size(); at += piece) streamed.add(parser.feed(text.substr(at, piece)));
  streamed.add(parser.finish());
  require(streamed == whole, "streamed == whole");
  const bool valid_utf8 = dsv4::utf8::first_invalid_offset(text) == text.size();
  for (const ParsedToolCall& call : valid_utf8 ? whole.tool_calls : std::vector<ParsedToolCall>{}) {
    nlohmann::ordered_json arguments;
    try {
      arguments = nlohmann::ordered_json::parse(call.arguments);
    } catch (const nlohmann::ordered_json::exception&) {
      require(false, "arguments are JSON");
    }
    require(arguments.is_object(), "arguments are a JSON object");
  }

  try {
    dsv4::parse_completion(text, mode);
  } catch (const dsv4::FormatError&) {
  }
  return 0;
}
