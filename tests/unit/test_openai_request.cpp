// OpenAI request parsing: full requests parse into the fields the engine gets, and each bad
// field is refused with status 400 and OpenAI's `param` naming it; prompts render through the
// DeepSeek-V4 encoding with tools, tool choice and response format where the encoder puts them.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace dsv4::server {
namespace {

using nlohmann::ordered_json;

ChatCompletionRequest chat(std::string_view body) {
  return parse_chat_completion_request(parse_request_body(body));
}

// The request is refused with `status` and `param`; returns the message.
template <typename Parse>
std::string expect_refused(Parse parse, std::string_view body, const std::optional<std::string>& param,
                           int status = 400) {
  try {
    if constexpr (std::is_invocable_v<Parse, const nlohmann::ordered_json&>)
      parse(parse_request_body(body));
    else
      parse(parse_request_body(body), SamplingDefaults{});  // the request parsers, OpenAI's defaults
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), status) << body;
    EXPECT_EQ(e.param(), param) << body << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << body;
  return "";
}

std::string expect_chat_refused(std::string_view body, const std::optional<std::string>& param) {
  return expect_refused(parse_chat_completion_request, body, param);
}

constexpr std::string_view kUser = R"("messages": [{"role": "user", "content": "hi"}])";

std::string with_user(std::string_view fields) {
  return "{" + std::string(kUser) + (fields.empty() ? "" : ", ") + std::string(fields) + "}";
}

TEST(OpenAiRequest, FullChatRequestParses) {
  const ChatCompletionRequest r = chat(R"({
    "model": "dsv4", "messages": [
      {"role": "system", "content": [{"type": "text", "text": "be"}, {"type": "text", "text": "brief"}]},
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "reasoning": "need a tool", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "tool_choice": "auto", "response_format": {"type": "json_object"},
    "stream": true, "stream_options": {"include_usage": true},
    "max_tokens": 10, "max_completion_tokens": 20, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "min_p": 0.05, "seed": -1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.1, "stop": ["END", "STOP"], "logprobs": true, "top_logprobs": 3,
    "logit_bias": {"50256": -100, "7": 2.5},
    "n": 1, "chat_template_kwargs": {"thinking": true}, "user": "ignored", "unknown": [1]})");
  EXPECT_EQ(r.model, "dsv4");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].content, "be\nbrief");
  EXPECT_EQ(r.messages[2].reasoning_content, "need a tool");
  EXPECT_EQ(r.messages[2].tool_calls.at(0).name, "get_weather");
  EXPECT_EQ(r.messages[3].tool_call_id, "call_1");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(r.response_format, ordered_json({{"type", "json_object"}}));
  EXPECT_EQ(r.thinking, ThinkingMode::kThinking);
  const GenerationOptions& g = r.generation;
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.include_usage);
  EXPECT_EQ(g.max_tokens, 20);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(g.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.top_p, 0.9f);
  EXPECT_EQ(g.top_k, 40);
  EXPECT_FLOAT_EQ(g.min_p, 0.05f);
  EXPECT_EQ(g.seed, ~uint64_t{0});
  EXPECT_FLOAT_EQ(g.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(g.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(g.repetition_penalty, 1.1f);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"END", "STOP"}));
  EXPECT_EQ(g.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {50256, -100.0f}}));
  EXPECT_TRUE(g.logprobs);
  EXPECT_EQ(g.top_logprobs, 3);
}

TEST(OpenAiRequest, JsonSchemaIsCompiledForTheConstraint) {
  const ChatCompletionRequest r = parse_chat_completion_request(parse_request_body(with_user(
      R"("response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object",
         "properties": {"k": {"enum": ["v"]}}, "required": ["k"], "additionalProperties": false}}})")));
  ASSERT_NE(r.json_schema, nullptr);
  EXPECT_EQ(r.json_schema->node(r.json_schema->root()).names, std::vector<std::string>{"k"});
  EXPECT_EQ(parse_chat_completion_request(parse_request_body(with_user(R"("response_format": {"type": "json_object"})")))
                .json_schema,
            nullptr);
}

// vLLM's structured-output extras: guided_json (an object or a string of JSON) and
// structured_outputs.json, on chat as a json_schema response_format, on completions compiled.
TEST(OpenAiRequest, GuidedJsonAndStructuredOutputsAreSchemas) {
  const ChatCompletionRequest chat = parse_chat_completion_request(
      parse_request_body(with_user(R"("guided_json": {"type": "object", "required": ["a"]})")));
  ASSERT_TRUE(chat.response_format.has_value());
  EXPECT_EQ((*chat.response_format)["type"], "json_schema");
  ASSERT_NE(chat.json_schema, nullptr);
  EXPECT_EQ(chat.json_schema->node(chat.json_schema->root()).names, std::vector<std::string>{"a"});
  const CompletionRequest completion = parse_completion_request(
      parse_request_body(R"({"prompt": "x", "structured_outputs": {"json": "{\"type\": \"object\"}"}})"));
  EXPECT_NE(completion.json_schema, nullptr);
  EXPECT_EQ(parse_completion_request(parse_request_body(R"({"prompt": "x"})")).json_schema, nullptr);
  expect_chat_refused(with_user(R"("guided_json": 5)"), "guided_json");
  expect_chat_refused(with_user(R"("guided_json": "{not json")"), "guided_json");
  expect_chat_refused(with_user(R"("guided_json": {}, "response_format": {"type": "json_object"})"), "guided_json");
  expect_chat_refused(with_user(R"("structured_outputs": {"json": []})"), "structured_outputs.json");
  expect_chat_refused(with_user(R"("guided_json": {"type": "object"}, "structured_outputs": {"json": {}})"),
                      "structured_outputs");
  expect_refused(parse_completion_request, R"({"prompt": "x", "guided_json": {"type": "nothing"}})", "guided_json");
  expect_chat_refused(with_user(R"("guided_json": {"type": "nothing"})"), "guided_json");
  expect_chat_refused(with_user(R"("structured_outputs": {"json": {"type": "object", "required": 1}})"),
                      "structured_outputs.json");
}

// vLLM's guided_choice and structured_outputs.choice: the list on both endpoints, refused when it
// is not a non-empty array of non-empty strings or comes with a JSON constraint or a forced tool call.
TEST(OpenAiRequest, GuidedChoiceIsAListOfStrings) {
  const ChatCompletionRequest chat = parse_chat_completion_request(
      parse_request_body(with_user(R"("guided_choice": ["yes", "no"])")));
  ASSERT_NE(chat.generation.choices, nullptr);
  EXPECT_EQ(*chat.generation.choices, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(render_chat_prompt(chat).mode, ThinkingMode::kChat);
  const CompletionRequest completion = parse_completion_request(
      parse_request_body(R"({"prompt": "x", "structured_outputs": {"choice": ["a", "b c"]}})"));
  ASSERT_NE(completion.generation.choices, nullptr);
  EXPECT_EQ(*completion.generation.choices, (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(parse_completion_request(parse_request_body(R"({"prompt": "x"})")).generation.choices, nullptr);
  expect_chat_refused(with_user(R"("guided_choice": "yes")"), "guided_choice");
  expect_chat_refused(with_user(R"("guided_choice": [])"), "guided_choice");
  expect_chat_refused(with_user(R"("guided_choice": ["a", 1])"), "guided_choice");
  expect_chat_refused(with_user(R"("guided_choice": ["a", ""])"), "guided_choice");
  expect_chat_refused(with_user(R"("guided_choice": ["a"], "structured_outputs": {"choice": ["b"]})"),
                      "structured_outputs");
  expect_chat_refused(with_user(R"("guided_choice": ["a"], "response_format": {"type": "json_object"})"),
                      "guided_choice");
  expect_chat_refused(with_user(R"("guided_choice": ["a"], "tools": [{"type": "function", "function": {"name": "f"}}],
                                   "tool_choice": "required")"),
                      "guided_choice");
  expect_refused(parse_completion_request, R"({"prompt": "x", "guided_choice": ["a"], "guided_json": {}})",
                 "guided_choice");
  std::string many = R"({"prompt": "x", "guided_choice": [)";
  for (size_t i = 0; i <= kMaxGuidedChoices; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\"";
  expect_refused(parse_completion_request, many + "]}", "guided_choice");
}

// vLLM's guided_regex and structured_outputs.regex: a pattern compiled on both endpoints (thinking
// off), refused when it is not a string, uses a construct the compiler refuses (named with its
// offset), or comes with another constraint or a forced tool call.
TEST(OpenAiRequest, GuidedRegexIsACompiledPattern) {
  const ChatCompletionRequest chat = parse_chat_completion_request(parse_request_body(
      with_user(R"json("guided_regex": "\\d{3}-(yes|no)", "chat_template_kwargs": {"thinking": true})json")));
  ASSERT_NE(chat.generation.regex, nullptr);
  EXPECT_TRUE(chat.generation.regex->full_match("123-yes"));
  EXPECT_FALSE(chat.generation.regex->full_match("123-maybe"));
  EXPECT_EQ(render_chat_prompt(chat).mode, ThinkingMode::kChat);
  const CompletionRequest completion = parse_completion_request(
      parse_request_body(R"({"prompt": "x", "structured_outputs": {"regex": "[a-c]+"}})"));
  ASSERT_NE(completion.generation.regex, nullptr);
  EXPECT_TRUE(completion.generation.regex->full_match("abc"));
  EXPECT_EQ(parse_completion_request(parse_request_body(R"({"prompt": "x"})")).generation.regex, nullptr);
  expect_chat_refused(with_user(R"("guided_regex": ["a"])"), "guided_regex");
  expect_chat_refused(with_user(R"json("guided_regex": "a(?=b)")json"), "guided_regex");
  expect_refused(parse_completion_request, R"({"prompt": "x", "structured_outputs": {"regex": "(a"}})",
                 "structured_outputs.regex");
  expect_chat_refused(with_user(R"("guided_regex": "a", "structured_outputs": {"regex": "b"})"), "structured_outputs");
  expect_chat_refused(with_user(R"("guided_regex": "a", "guided_choice": ["a"])"), "guided_regex");
  expect_chat_refused(with_user(R"("guided_regex": "a", "response_format": {"type": "json_object"})"), "guided_regex");
  expect_chat_refused(with_user(R"("structured_outputs": {"regex": "a", "json": {"type": "object"}})"), "guided_regex");
  expect_chat_refused(with_user(R"("guided_regex": "a", "tools": [{"type": "function", "function": {"name": "f"}}],
                                   "tool_choice": {"type": "function", "function": {"name": "f"}})"),
                      "guided_regex");
  expect_refused(parse_completion_request, R"({"prompt": "x", "guided_regex": "a", "guided_json": {}})",
                 "guided_regex");
  // A JSON schema's string pattern is compiled the same way; a refused one names the schema's field.
  expect_chat_refused(
      with_user(R"j("guided_json": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)"}}})j"),
      "guided_json");
  const std::string message = expect_chat_refused(with_user(R"("guided_regex": "ab\\1")"), "guided_regex");
  EXPECT_NE(message.find("the backreference '\\1' at offset 2"), std::string::npos) << message;
}

TEST(OpenAiRequest, DefaultsFollowOpenAi) {
  const ChatCompletionRequest r = chat(with_user(""));
  EXPECT_FALSE(r.model.has_value());
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(r.thinking, ThinkingMode::kChat);
  EXPECT_FALSE(r.generation.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.generation.temperature, 1.0f);
  EXPECT_FALSE(r.generation.stream);
  EXPECT_EQ(chat(with_user(R"("tools": [{"type": "function", "function": {"name": "f"}}])")).tool_choice,
            ToolChoice::kAuto);
  EXPECT_EQ(chat(with_user(R"("stop": "x", "top_k": -1)")).generation.stop,
            std::vector<std::string>{"x"});
}

TEST(OpenAiRequest, BadBodiesAreRefused) {
  const auto any = [](const ordered_json&) {};
  EXPECT_NE(expect_refused(any, "{\"messages\": [", std::nullopt).find("not valid JSON"),
            std::string::npos);
  expect_refused(any, "[1, 2]", std::nullopt);
  expect_refused(any, "", std::nullopt);
  // A number beyond double's range is a JSON error too (nlohmann throws out_of_range for it).
  expect_refused(any, R"({"max_tokens": 1e400})", std::nullopt);
  // Deep nesting is refused before the parser recurses.
  expect_refused(any, "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
                 std::nullopt);
  // Brackets inside strings do not count as nesting.
  EXPECT_NO_THROW(parse_request_body("{\"a\": \"" + std::string(1000, '[') + "\"}"));
}

TEST(OpenAiRequest, EachBadChatFieldIsNamed) {
  expect_chat_refused("{}", "messages");
  expect_chat_refused(R"({"messages": []})", "messages");
  expect_chat_refused(R"({"messages": "hi"})", "messages");
  expect_chat_refused(R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role");
  expect_chat_refused(R"({"messages": [{"role": "user", "content": 5}]})",
                      "messages[0].content");
  expect_chat_refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                      "messages[0].content[0]");
  expect_chat_refused(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]})",
                      "messages[0].tool_calls[0].function.arguments");
  expect_chat_refused(with_user(R"("model": 3)"), "model");
  expect_chat_refused(with_user(R"("temperature": "hot")"), "temperature");
  expect_chat_refused(with_user(R"("temperature": 2.5)"), "temperature");
  expect_chat_refused(with_user(R"("top_p": 0)"), "top_p");
  expect_chat_refused(with_user(R"("top_k": -2)"), "top_k");
  expect_chat_refused(with_user(R"("top_k": 1.5)"), "top_k");
  expect_chat_refused(with_user(R"("min_p": 1.5)"), "min_p");
  expect_chat_refused(with_user(R"("seed": "x")"), "seed");
  expect_chat_refused(with_user(R"("presence_penalty": 3)"), "presence_penalty");
  expect_chat_refused(with_user(R"("frequency_penalty": -3)"), "frequency_penalty");
  expect_chat_refused(with_user(R"("repetition_penalty": 0)"), "repetition_penalty");
  expect_chat_refused(with_user(R"("max_tokens": 0)"), "max_tokens");
  expect_chat_refused(with_user(R"("max_tokens": 18446744073709551615)"), "max_tokens");
  expect_chat_refused(with_user(R"("max_completion_tokens": "10")"), "max_completion_tokens");
  expect_chat_refused(with_user(R"("stop": 5)"), "stop");
  expect_chat_refused(with_user(R"("stop": ["a", 5])"), "stop[1]");
  expect_chat_refused(with_user(R"("stop": [""])"), "stop");
  expect_chat_refused(with_user(R"("stop_token_ids": [-1])"), "stop_token_ids[0]");
  expect_chat_refused(with_user(R"("min_tokens": -1)"), "min_tokens");
  expect_chat_refused(with_user(R"("include_stop_str_in_output": "yes")"), "include_stop_str_in_output");
  expect_chat_refused(with_user(R"("logit_bias": [1])"), "logit_bias");
  expect_chat_refused(with_user(R"("logit_bias": {"x1": 1})"), "logit_bias");
  expect_chat_refused(with_user(R"("logit_bias": {"-1": 1})"), "logit_bias");
  expect_chat_refused(with_user(R"("logit_bias": {"3": 101})"), "logit_bias.3");
  expect_chat_refused(with_user(R"("logit_bias": {"3": "up"})"), "logit_bias.3");
  expect_chat_refused(with_user(R"("stream": "yes")"), "stream");
  expect_chat_refused(with_user(R"("stream_options": {"include_usage": true})"), "stream_options");
  expect_chat_refused(with_user(R"("stream": true, "stream_options": {"include_usage": 1})"),
                      "stream_options.include_usage");
  expect_chat_refused(with_user(R"("logprobs": 1)"), "logprobs");
  expect_chat_refused(with_user(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs");
  expect_chat_refused(with_user(R"("top_logprobs": 2)"), "top_logprobs");
  expect_chat_refused(with_user(R"("prompt_logprobs": 21)"), "prompt_logprobs");
  expect_chat_refused(with_user(R"("prompt_logprobs": -1)"), "prompt_logprobs");
  expect_chat_refused(with_user(R"("prompt_logprobs": true)"), "prompt_logprobs");
  EXPECT_NE(expect_chat_refused(with_user(R"("prompt_logprobs": 1, "stream": true)"), "prompt_logprobs")
                .find("not available when stream is true"),
            std::string::npos);
  EXPECT_NE(expect_chat_refused(with_user(R"("n": 65)"), "n").find("65 is above the maximum of 64."), std::string::npos);
  EXPECT_NE(expect_chat_refused(with_user(R"("n": 0)"), "n").find("0 is below the minimum of 1."), std::string::npos);
  EXPECT_NE(expect_chat_refused(with_user(R"("max_tokens": -1)"), "max_tokens").find("-1 is below the minimum of 1."),
            std::string::npos);
  expect_chat_refused(with_user(R"("tools": {"type": "function"})"), "tools");
  expect_chat_refused(with_user(R"("tools": [{"type": "function"}])"), "tools[0].function");
  expect_chat_refused(with_user(R"("tool_choice": "sometimes", "tools": [{"function": {"name": "f"}}])"),
                      "tool_choice");
  expect_chat_refused(with_user(R"("tool_choice": "required")"), "tool_choice");
  expect_chat_refused(
      with_user(R"("tool_choice": {"type": "function", "function": {"name": "g"}}, "tools": [{"function": {"name": "f"}}])"),
      "tool_choice");
  expect_chat_refused(with_user(R"("tool_choice": {"type": "function"}, "tools": [{"function": {"name": "f"}}])"),
                      "tool_choice.function");
  expect_chat_refused(with_user(R"("tool_choice": {"type": "function", "function": {}}, "tools": [{"function": {"name": "f"}}])"),
                      "tool_choice.function.name");
  expect_chat_refused(with_user(R"("response_format": {})"), "response_format.type");
  expect_chat_refused(with_user(R"("response_format": {"type": "xml"})"), "response_format.type");
  expect_chat_refused(with_user(R"("response_format": {"type": "json_schema"})"),
                      "response_format.json_schema");
  expect_chat_refused(with_user(R"("response_format": "json")"), "response_format");
  // A json_schema's schema is compiled: what it cannot enforce is a 400 naming the part.
  EXPECT_NE(expect_chat_refused(with_user(R"("response_format": {"type": "json_schema", "json_schema": {"name": "r",
                                             "schema": {"type": "object", "properties": {"n": {"type": "int"}}}}})"),
                                "response_format.json_schema.schema")
                .find("/properties/n/type"),
            std::string::npos);
  // A JSON answer and a forced tool call exclude each other.
  expect_chat_refused(with_user(R"("response_format": {"type": "json_object"}, "tool_choice": "required",
                                   "tools": [{"function": {"name": "f"}}])"),
                      "response_format");
  expect_chat_refused(with_user(R"("response_format": {"type": "json_object"}, "tools": [{"function": {"name": "f"}}],
                                   "tool_choice": {"type": "function", "function": {"name": "f"}})"),
                      "response_format");
  expect_chat_refused(with_user(R"("chat_template_kwargs": {"thinking": "yes"})"),
                      "chat_template_kwargs.thinking");
  expect_chat_refused(with_user(R"("reasoning_effort": "extreme")"), "reasoning_effort");
}

TEST(OpenAiRequest, CompletionPromptForms) {
  const auto completion = [](std::string_view body) {
    return parse_completion_request(parse_request_body(body));
  };
  EXPECT_EQ(completion(R"({"prompt": "hi"})").prompts.at(0).text, "hi");
  EXPECT_EQ(completion(R"({"prompt": ["hi"]})").prompts.at(0).text, "hi");
  EXPECT_EQ(completion(R"({"prompt": [1, 2, 3]})").prompts.at(0).ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(completion(R"({"prompt": [[4, 5]]})").prompts.at(0).ids, (std::vector<int32_t>{4, 5}));
  const CompletionRequest several = completion(R"({"prompt": ["a", [7, 8], "b"], "n": 2})");
  ASSERT_EQ(several.prompts.size(), 3u);
  EXPECT_EQ(several.prompts[1].ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(several.prompts[2].text, "b");
  const CompletionRequest r = completion(R"({"prompt": "x", "logprobs": 2})");
  EXPECT_EQ(r.generation.max_tokens, kDefaultCompletionMaxTokens);
  EXPECT_TRUE(r.generation.logprobs);
  EXPECT_EQ(r.generation.top_logprobs, 2);
  EXPECT_TRUE(completion(R"({"prompt": "x", "logprobs": 0})").generation.logprobs);
  EXPECT_FALSE(completion(R"({"prompt": "x", "logprobs": null})").generation.logprobs);

  const auto refused = [](std::string_view body, const std::string& param) {
    expect_refused(parse_completion_request, body, param);
  };
  refused("{}", "prompt");
  refused(R"({"prompt": ""})", "prompt");
  refused(R"({"prompt": []})", "prompt");
  refused(R"({"prompt": ["a", ""]})", "prompt[1]");
  refused(R"({"prompt": ["a", 5]})", "prompt[1]");
  refused(R"({"prompt": [[1], [2, "x"]]})", "prompt[1][1]");
  refused(R"({"prompt": ["a", "b", "c"], "n": 22})", "prompt");  // 66 choices
  refused(R"({"prompt": [1, "a"]})", "prompt[1]");
  refused(R"({"prompt": [1, 4294967296]})", "prompt[1]");
  refused(R"({"prompt": 5})", "prompt");
  refused(R"({"prompt": "x", "logprobs": 6})", "logprobs");
  EXPECT_EQ(completion(R"({"prompt": "x", "prompt_logprobs": 3})").generation.prompt_logprobs, 3);
  EXPECT_FALSE(completion(R"({"prompt": "x", "prompt_logprobs": null})").generation.prompt_logprobs.has_value());
  refused(R"({"prompt": "x", "prompt_logprobs": 2, "stream": true})", "prompt_logprobs");
  EXPECT_TRUE(completion(R"({"prompt": "x", "echo": true})").echo);
  refused(R"({"prompt": "x", "echo": 1})", "echo");
  refused(R"({"prompt": "x", "suffix": "y"})", "suffix");
  refused(R"({"prompt": "x", "best_of": 2})", "best_of");
  refused(R"({"prompt": "x", "n": 100})", "n");
}

// vLLM's allowed_token_ids and truncate_prompt_tokens, on both endpoints: parsed as given, and each
// bad value a 400 naming the field (the element of a list), its message the value.
TEST(OpenAiRequest, AllowedTokenIdsAndTruncatePromptTokens) {
  const ChatCompletionRequest c = chat(with_user(R"("allowed_token_ids": [5, 3, 5], "truncate_prompt_tokens": 7)"));
  EXPECT_EQ(c.generation.allowed_token_ids, (std::vector<int32_t>{5, 3, 5}));
  EXPECT_EQ(c.generation.truncate_prompt_tokens, 7);
  const CompletionRequest t = parse_completion_request(
      parse_request_body(R"({"prompt": "x", "allowed_token_ids": [9], "truncate_prompt_tokens": -1})"));
  EXPECT_EQ(t.generation.allowed_token_ids, std::vector<int32_t>{9});
  EXPECT_EQ(t.generation.truncate_prompt_tokens, -1);
  const ChatCompletionRequest plain = chat(with_user(R"("allowed_token_ids": null)"));
  EXPECT_TRUE(plain.generation.allowed_token_ids.empty());
  EXPECT_FALSE(plain.generation.truncate_prompt_tokens.has_value());

  for (const auto parse : {+[](const ordered_json& b) { parse_chat_completion_request(b); },
                           +[](const ordered_json& b) { parse_completion_request(b); }}) {
    const auto body = [](std::string_view fields) {
      return "{" + std::string(kUser) + R"(, "prompt": "x", )" + std::string(fields) + "}";
    };
    expect_refused(parse, body(R"("allowed_token_ids": 5)"), "allowed_token_ids");
    EXPECT_NE(expect_refused(parse, body(R"("allowed_token_ids": [])"), "allowed_token_ids").find("at least one"),
              std::string::npos);
    EXPECT_NE(expect_refused(parse, body(R"("allowed_token_ids": [1, -4])"), "allowed_token_ids[1]").find("-4"),
              std::string::npos);
    expect_refused(parse, body(R"("allowed_token_ids": [1, "2"])"), "allowed_token_ids[1]");
    expect_refused(parse, body(R"("allowed_token_ids": [1.5])"), "allowed_token_ids[0]");
    expect_refused(parse, body(R"("allowed_token_ids": [4294967296])"), "allowed_token_ids[0]");
    EXPECT_NE(expect_refused(parse, body(R"("truncate_prompt_tokens": 0)"), "truncate_prompt_tokens").find("0 keeps"),
              std::string::npos);
    EXPECT_NE(expect_refused(parse, body(R"("truncate_prompt_tokens": -2)"), "truncate_prompt_tokens").find("-2"),
              std::string::npos);
    expect_refused(parse, body(R"("truncate_prompt_tokens": 2.5)"), "truncate_prompt_tokens");
    expect_refused(parse, body(R"("truncate_prompt_tokens": "3")"), "truncate_prompt_tokens");
  }
}

// vLLM's bad_words, on both endpoints: the strings as given (the server tokenizes them), and a
// 400 naming the field, or the element, for anything but a list of at most kMaxBadWords non-empty
// strings.
TEST(OpenAiRequest, BadWords) {
  const ChatCompletionRequest c = chat(with_user(R"("bad_words": ["Paris", " the end", "Paris"])"));
  EXPECT_EQ(c.generation.bad_words, (std::vector<std::string>{"Paris", " the end", "Paris"}));
  const CompletionRequest t = parse_completion_request(parse_request_body(R"({"prompt": "x", "bad_words": []})"));
  EXPECT_TRUE(t.generation.bad_words.empty());
  EXPECT_TRUE(chat(with_user(R"("bad_words": null)")).generation.bad_words.empty());

  ordered_json many = ordered_json::array();
  for (size_t i = 0; i <= kMaxBadWords; ++i) many.push_back("w" + std::to_string(i));
  for (const auto parse : {+[](const ordered_json& b) { parse_chat_completion_request(b); },
                           +[](const ordered_json& b) { parse_completion_request(b); }}) {
    const auto body = [](std::string_view fields) {
      return "{" + std::string(kUser) + R"(, "prompt": "x", )" + std::string(fields) + "}";
    };
    expect_refused(parse, body(R"("bad_words": "Paris")"), "bad_words");
    expect_refused(parse, body(R"("bad_words": {"Paris": 1})"), "bad_words");
    EXPECT_NE(expect_refused(parse, body(R"("bad_words": ["a", ""])"), "bad_words[1]").find("empty"),
              std::string::npos);
    expect_refused(parse, body(R"("bad_words": ["a", 3])"), "bad_words[1]");
    expect_refused(parse, body(R"("bad_words": [["a"]])"), "bad_words[0]");
    EXPECT_NE(expect_refused(parse, body(R"("bad_words": )" + many.dump()), "bad_words").find("at most 1024"),
              std::string::npos);
  }
}

TEST(OpenAiRequest, TokenizeAndDetokenize) {
  EXPECT_EQ(parse_tokenize_request(parse_request_body(R"({"prompt": "a"})")).prompt, "a");
  EXPECT_TRUE(parse_tokenize_request(parse_request_body(with_user(""))).chat.has_value());
  expect_refused(parse_tokenize_request, "{}", "prompt");
  expect_refused(parse_tokenize_request, R"({"prompt": 1})", "prompt");
  EXPECT_EQ(parse_detokenize_request(parse_request_body(R"({"tokens": [7, 8]})")).tokens,
            (std::vector<int32_t>{7, 8}));
  expect_refused(parse_detokenize_request, R"({"tokens": "7"})", "tokens");
  expect_refused(parse_detokenize_request, R"({"tokens": [1.5]})", "tokens[0]");
}

TEST(OpenAiRequest, PromptRendering) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  // Plain chat: DeepSeek-V4's chat mode.
  EXPECT_EQ(render_chat_prompt(chat(with_user(""))).text,
            "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  const ChatPrompt thinking =
      render_chat_prompt(chat(with_user(R"("chat_template_kwargs": {"thinking": true})")));
  EXPECT_TRUE(thinking.text.ends_with("<｜Assistant｜><think>"));
  EXPECT_EQ(thinking.mode, ThinkingMode::kThinking);
  // Tools go on a system message in front; tool_choice none leaves them out.
  const ChatPrompt with_tools = render_chat_prompt(chat(with_user(tools)));
  EXPECT_TRUE(with_tools.parse_tool_calls);
  EXPECT_NE(with_tools.text.find("## Tools"), std::string::npos);
  const ChatPrompt none = render_chat_prompt(chat(with_user(tools + R"(, "tool_choice": "none")")));
  EXPECT_FALSE(none.parse_tool_calls);
  EXPECT_EQ(none.text.find("## Tools"), std::string::npos);
  // required / named open the tool-call block in chat mode, even when thinking was asked for.
  const ChatPrompt named = render_chat_prompt(chat(with_user(
      tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}},
                 "chat_template_kwargs": {"thinking": true})")));
  EXPECT_EQ(named.mode, ThinkingMode::kChat);
  EXPECT_EQ(named.tool_call_prefill, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n");
  EXPECT_TRUE(named.text.ends_with("<｜Assistant｜></think>" + named.tool_call_prefill));
  // response_format joins the system message, and the answer (the JSON object alone) comes in
  // chat mode even when thinking was asked for.
  const ChatPrompt json = render_chat_prompt(chat(with_user(
      R"("response_format": {"type": "json_object"}, "chat_template_kwargs": {"thinking": true})")));
  EXPECT_NE(json.text.find("## Response Format:"), std::string::npos);
  EXPECT_EQ(json.mode, ThinkingMode::kChat);
  EXPECT_TRUE(json.text.ends_with("<｜Assistant｜></think>"));
  // Tools both on the system message and in the request: refused, naming tools.
  expect_refused(
      [](const ordered_json& body) { render_chat_prompt(parse_chat_completion_request(body)); },
      R"({"messages": [{"role": "system", "content": "s", "tools": [{"function": {"name": "g"}}]},
                       {"role": "user", "content": "u"}], )" + tools + "}",
      "tools");
}

TEST(OpenAiRequest, ErrorObjectHasOpenAisShape) {
  const ApiError error = invalid_request("bad", "temperature", "invalid_value");
  EXPECT_EQ(error.to_json().dump(),
            R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":"invalid_value"}})");
  EXPECT_EQ(model_not_found("x").status(), 404);
  EXPECT_EQ(invalid_api_key().to_json()["error"]["param"], nullptr);
}

}  // namespace
}  // namespace dsv4::server
