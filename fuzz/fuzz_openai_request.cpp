// libFuzzer entry point for the OpenAI request parser: any body must parse into a request (and a
// chat request must render or be refused) or be refused with an ApiError of status 4xx; anything
// else (another exception, a crash) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/api_error.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  using namespace dsv4::server;
  try {
    const nlohmann::ordered_json json = parse_request_body(body);
    // The first byte picks the route, so one corpus covers all of them.
    switch (size % 4) {
      case 0: {
        const ChatCompletionRequest request = parse_chat_completion_request(json);
        render_chat_prompt(request);
        // A compiled response_format schema checks the body's own bytes as if generated.
        if (request.json_schema) {
          dsv4::JsonSchemaPrefix prefix(request.json_schema.get());
          for (char byte : body) prefix.advance(byte);
        }
        break;
      }
      case 1: parse_completion_request(json); break;
      case 2: parse_tokenize_request(json); break;
      default: parse_detokenize_request(json); break;
    }
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) {
      std::fprintf(stderr, "ApiError with status %d: %s\n", e.status(), e.what());
      std::abort();
    }
    // Error messages are sent as JSON: they must serialise.
    (void)e.to_json().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  return 0;
}
