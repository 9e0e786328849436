// DeepSeek-V4 prompt encoding: DeepSeek's four test vectors byte for byte, their parsing checks,
// the encoder's rules one at a time (expected strings printed by the reference encoder),
// completion parsing and its errors, JSON errors naming the message and field, and the special
// token ids, checked against the real tokenizer.json when scripts/setup.sh has fetched it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

const std::string kVectors = std::string(DSV4_SHARED_DIR) + "/data/encoding-tests/";
constexpr std::string_view kThinkingReply = "<｜Assistant｜><think>";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ordered_json read_input(int n) {
  return ordered_json::parse(read_file(kVectors + "test_input_" + std::to_string(n) + ".json"));
}

std::string read_expected(int n) {
  return read_file(kVectors + "test_output_" + std::to_string(n) + ".txt");
}

// The conversation of case n, with case 1's request-level tools attached as the README says.
std::vector<ChatMessage> case_messages(int n) {
  const ordered_json input = read_input(n);
  if (input.is_array()) return parse_chat_messages(input);
  std::vector<ChatMessage> messages = parse_chat_messages(input["messages"]);
  attach_tools(messages, parse_chat_tools(input["tools"]));
  return messages;
}

ChatEncodeOptions mode_options(ThinkingMode mode) {
  ChatEncodeOptions options;
  options.mode = mode;
  return options;
}

// Where the first difference is, so a failure says more than "strings differ".
void expect_same_text(const std::string& actual, const std::string& expected) {
  if (actual == expected) return;
  size_t at = 0;
  while (at < actual.size() && at < expected.size() && actual[at] == expected[at]) ++at;
  const size_t from = at < 40 ? 0 : at - 40;
  ADD_FAILURE() << "texts differ at byte " << at << " (sizes " << actual.size() << " and "
                << expected.size() << ")\n  actual:   ..." << actual.substr(from, 100)
                << "\n  expected: ..." << expected.substr(from, 100);
}

// ---- DeepSeek's test vectors --------------------------------------------------------------

TEST(ChatEncodingVectors, FourCasesByteIdentical) {
  const ThinkingMode modes[] = {ThinkingMode::kThinking, ThinkingMode::kThinking,
                                ThinkingMode::kThinking, ThinkingMode::kChat};
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE("case " + std::to_string(n));
    expect_same_text(encode_chat_prompt(case_messages(n), mode_options(modes[n - 1])),
                     read_expected(n));
  }
}

TEST(ChatEncodingVectors, Case1FirstAssistantTurnParsesToTheToolCall) {
  const std::vector<ChatMessage> messages = case_messages(1);
  const std::string prompt = encode_chat_prompt(messages);
  // As DeepSeek's test does: from the first "<｜Assistant｜><think>" to the next user turn.
  const size_t start = prompt.find(kThinkingReply) + kThinkingReply.size();
  const size_t end = prompt.find("<｜User｜>", start);
  ASSERT_NE(end, std::string::npos);
  const ChatMessage parsed = parse_completion(std::string_view(prompt).substr(start, end - start),
                                              ThinkingMode::kThinking);

  const ChatMessage& original = messages[2];
  EXPECT_EQ(parsed.role, ChatRole::kAssistant);
  EXPECT_EQ(parsed.reasoning_content, original.reasoning_content);
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].name, "get_weather");
  EXPECT_EQ(parsed.tool_calls[0].arguments,
            ordered_json::parse(R"({"location": "Beijing", "unit": "celsius"})"));
  // The arguments string comes back exactly as the request gave it.
  EXPECT_EQ(
      parsed.tool_calls[0].arguments_text(),
      read_input(1)["messages"][2]["tool_calls"][0]["function"]["arguments"].get<std::string>());
}

TEST(ChatEncodingVectors, LastAssistantTurnsParseBack) {
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE("case " + std::to_string(n));
    const std::vector<ChatMessage> messages = case_messages(n);
    const std::string expected = read_expected(n);
    const size_t start = expected.rfind(kThinkingReply) + kThinkingReply.size();
    const ChatMessage parsed =
        parse_completion(std::string_view(expected).substr(start), ThinkingMode::kThinking);
    EXPECT_EQ(parsed.reasoning_content, messages.back().reasoning_content);
    EXPECT_EQ(parsed.content, messages.back().content);
    EXPECT_TRUE(parsed.tool_calls.empty());
  }
}

TEST(ChatEncodingVectors, Case2DropsEarlierReasoning) {
  const std::string prompt = encode_chat_prompt(case_messages(2));
  EXPECT_EQ(prompt.find(*case_messages(2)[2].reasoning_content), std::string::npos);
}

TEST(ChatEncodingVectors, Case3ToolCallTurnParses) {
  const std::string expected = read_expected(3);
  const size_t start = expected.find(kThinkingReply) + kThinkingReply.size();
  const size_t end = expected.find("<｜User｜>", start);
  const ChatMessage parsed = parse_completion(std::string_view(expected).substr(start, end - start),
                                              ThinkingMode::kThinking);
  const ChatMessage original = case_messages(3)[3];
  EXPECT_EQ(parsed.reasoning_content, original.reasoning_content);
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].name, original.tool_calls[0].name);
  EXPECT_EQ(parsed.tool_calls[0].arguments, original.tool_calls[0].arguments);
}

TEST(ChatEncodingVectors, Case4TaskAnswerParsesInChatMode) {
  const std::string expected = read_expected(4);
  constexpr std::string_view kAction = "<｜action｜>";
  const size_t start = expected.rfind(kAction) + kAction.size();
  const ChatMessage parsed =
      parse_completion(std::string_view(expected).substr(start), ThinkingMode::kChat);
  EXPECT_EQ(parsed.content, case_messages(4).back().content);
  EXPECT_FALSE(parsed.reasoning_content.has_value());
}

TEST(ChatEncodingVectors, MessagesSurviveAJsonRoundTrip) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE("case " + std::to_string(n));
    const std::vector<ChatMessage> messages = case_messages(n);
    ordered_json json = ordered_json::array();
    for (const ChatMessage& message : messages) json.push_back(chat_message_to_json(message));
    EXPECT_EQ(parse_chat_messages(json), messages);
  }
}

// ---- The encoder's rules --------------------------------------------------------------------

std::vector<ChatMessage> parse(std::string_view json) {
  return parse_chat_messages(ordered_json::parse(json));
}

TEST(ChatEncodingRules, KeepsAllReasoningWithoutDropThinking) {
  ChatEncodeOptions options;
  options.drop_thinking = false;
  EXPECT_EQ(
      encode_chat_prompt(case_messages(2), options),
      "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello<｜Assistant｜><think>"
      "The user said hello, I should greet back.</think>Hi there! How can I help you?"
      "<｜end▁of▁sentence｜><｜User｜>What is the capital of France?<｜Assistant｜><think>"
      "The user asks about the capital of France. It is Paris.</think>The capital of France is "
      "Paris.<｜end▁of▁sentence｜>");
}

TEST(ChatEncodingRules, MaxReasoningEffortPrefixesThinkingPromptsOnly) {
  const auto messages = parse(R"([{"role": "user", "content": "hi"}])");
  ChatEncodeOptions options;
  options.reasoning_effort = ReasoningEffort::kMax;
  EXPECT_EQ(
      encode_chat_prompt(messages, options),
      "<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
      "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
      "resolve the root cause, rigorously stress-testing your logic against all potential "
      "paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire "
      "deliberation process, documenting every intermediate step, considered alternative, and "
      "rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
      "<｜User｜>hi<｜Assistant｜><think>");
  options.mode = ThinkingMode::kChat;
  EXPECT_EQ(encode_chat_prompt(messages, options),
            "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  options.add_bos = false;
  EXPECT_EQ(encode_chat_prompt(messages, options), "<｜User｜>hi<｜Assistant｜></think>");
}

TEST(ChatEncodingRules, ToolResultsFollowCallOrderAndMergeWithTheNextUserText) {
  const auto messages = parse(R"([
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
      {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{\"n\": 2}"}}]},
    {"role": "tool", "tool_call_id": "b", "content": "B"},
    {"role": "tool", "tool_call_id": "a", "content": "A"},
    {"role": "user", "content": "more"}])");
  EXPECT_EQ(
      encode_chat_prompt(messages, mode_options(ThinkingMode::kChat)),
      "<｜begin▁of▁sentence｜><｜User｜>go<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n"
      "<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"g\">\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>A</tool_result>\n\n"
      "<tool_result>B</tool_result>\n\nmore<｜Assistant｜></think>");
}

TEST(ChatEncodingRules, ToolContentPartsAreJoined) {
  const auto messages = parse(R"([
    {"role": "user", "content": "q"},
    {"role": "tool", "content": [{"type": "text", "text": "t1"}, {"type": "image"}, {"type": "text", "text": "t2"}]}])");
  EXPECT_EQ(encode_chat_prompt(messages),
            "<｜begin▁of▁sentence｜><｜User｜>q\n\n<tool_result>t1\n\n[Unsupported image]\n\nt2"
            "</tool_result><｜Assistant｜><think>");
}

TEST(ChatEncodingRules, DropThinkingDropsEarlierDeveloperMessages) {
  const auto messages = parse(R"([
    {"role": "developer", "content": "d"},
    {"role": "assistant", "content": "x", "reasoning_content": "r"},
    {"role": "user", "content": "u"}])");
  EXPECT_EQ(encode_chat_prompt(messages),
            "<｜begin▁of▁sentence｜>x<｜end▁of▁sentence｜><｜User｜>u<｜Assistant｜><think>");
}

TEST(ChatEncodingRules, WithoutEosLeavesTheAssistantTurnOpen) {
  const auto messages = parse(R"([
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "par", "reasoning_content": "r", "wo_eos": true}])");
  EXPECT_EQ(encode_chat_prompt(messages),
            "<｜begin▁of▁sentence｜><｜User｜>u<｜Assistant｜><think>r</think>par");
}

TEST(ChatEncodingRules, NonActionTaskTokenFollowsTheUserTurn) {
  const auto messages = parse(R"([
    {"role": "user", "content": "q", "task": "query"},
    {"role": "assistant", "content": "k"}])");
  EXPECT_EQ(encode_chat_prompt(messages),
            "<｜begin▁of▁sentence｜><｜User｜>q<｜query｜>k<｜end▁of▁sentence｜>");
}

TEST(ChatEncodingRules, ResponseFormatFollowsTheSystemText) {
  const auto messages = parse(R"([
    {"role": "system", "content": "s", "response_format": {"type": "json_object"}},
    {"role": "user", "content": "u"}])");
  EXPECT_EQ(
      encode_chat_prompt(messages, mode_options(ThinkingMode::kChat)),
      "<｜begin▁of▁sentence｜>s\n\n## Response Format:\n\nYou MUST strictly adhere to the "
      "following schema to reply:\n{\"type\": \"json_object\"}<｜User｜>u<｜Assistant｜></think>");
}

TEST(ChatEncodingRules, AttachToolsAddsASystemMessageWhenThereIsNone) {
  std::vector<ChatMessage> messages = parse(R"([{"role": "user", "content": "u"}])");
  const auto tools =
      parse_chat_tools(ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])"));
  attach_tools(messages, tools);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0].role, ChatRole::kSystem);
  EXPECT_EQ(messages[0].tools, tools);
  EXPECT_EQ(messages[1].role, ChatRole::kUser);
  const std::string prompt = encode_chat_prompt(messages);
  EXPECT_TRUE(prompt.starts_with("<｜begin▁of▁sentence｜>\n\n## Tools\n\n"))
      << prompt.substr(0, 80);
  EXPECT_NE(prompt.find("{\"name\": \"f\"}\n"), std::string::npos);
  EXPECT_THROW(attach_tools(messages, tools), UsageError);
}

// ---- Completions ----------------------------------------------------------------------------

// The completion the model would have to write to produce `reply` after `history`.
std::string completion_for(std::vector<ChatMessage> history, const ChatMessage& reply,
                           const ChatEncodeOptions& options) {
  const std::string prompt = encode_chat_prompt(history, options);
  history.push_back(reply);
  const std::string full = encode_chat_prompt(history, options);
  EXPECT_TRUE(full.starts_with(prompt));
  return full.substr(prompt.size());
}

ChatMessage assistant_with_tool_calls() {
  ChatMessage reply;
  reply.role = ChatRole::kAssistant;
  reply.reasoning_content = "Need two tools; 中文 reasoning.\nSecond line.";
  reply.content = "Calling them.";
  reply.tool_calls.push_back(
      {"", "search",
       ordered_json::parse(R"({"query": "a \"quoted\" <b>x</b>\nline", "n": 3, "ratio": 0.25,
                               "flags": [true, null], "nested": {"k": "中", "e": {}}})")});
  reply.tool_calls.push_back({"", "noop", ordered_json::object()});
  return reply;
}

TEST(ChatCompletion, AssistantWithReasoningAndToolCallsRoundTrips) {
  const std::vector<ChatMessage> history = parse(R"([{"role": "user", "content": "u"}])");
  for (ThinkingMode mode : {ThinkingMode::kThinking, ThinkingMode::kChat}) {
    SCOPED_TRACE(mode == ThinkingMode::kThinking ? "thinking" : "chat");
    const ChatMessage reply = assistant_with_tool_calls();
    const std::string completion = completion_for(history, reply, mode_options(mode));
    const ChatMessage parsed = parse_completion(completion, mode);
    EXPECT_EQ(parsed.role, ChatRole::kAssistant);
    EXPECT_EQ(parsed.content, reply.content);
    if (mode == ThinkingMode::kThinking) {
      EXPECT_EQ(parsed.reasoning_content, reply.reasoning_content);
    } else {
      EXPECT_FALSE(parsed.reasoning_content.has_value());
    }
    EXPECT_EQ(parsed.tool_calls, reply.tool_calls);
  }
}

TEST(ChatCompletion, ToolCallsMayEndWithoutEos) {
  std::string completion = completion_for(parse(R"([{"role": "user", "content": "u"}])"),
                                          assistant_with_tool_calls(), {});
  ASSERT_TRUE(completion.ends_with(chat_token::kEos));
  completion.resize(completion.size() - chat_token::kEos.size());
  EXPECT_EQ(parse_completion(completion, ThinkingMode::kThinking).tool_calls.size(), 2u);
}

void expect_format_error(std::string_view completion, ThinkingMode mode,
                         const std::string& fragment) {
  try {
    parse_completion(completion, mode);
    ADD_FAILURE() << "no error for: " << completion;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << fragment << "\"";
  }
}

TEST(ChatCompletion, MalformedCompletionsAreRejected) {
  constexpr auto kThinking = ThinkingMode::kThinking;
  constexpr auto kChat = ThinkingMode::kChat;
  expect_format_error("reasoning only<｜end▁of▁sentence｜>", kThinking, "not closed by </think>");
  expect_format_error("r</think>no end", kThinking, "no <｜end▁of▁sentence｜>");
  expect_format_error("hi<｜end▁of▁sentence｜>more", kChat, "expected the end of the completion");
  expect_format_error("a<think>b<｜end▁of▁sentence｜>", kChat,
                      "content contains the special token \"<think>\"");
  expect_format_error("r<｜begin▁of▁sentence｜></think>c<｜end▁of▁sentence｜>", kThinking,
                      "reasoning contains the special token");

  const std::string calls = "c\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  const std::string end = "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
  const auto param = [](std::string_view name, std::string_view string, std::string_view value) {
    return "<｜DSML｜parameter name=\"" + std::string(name) + "\" string=\"" + std::string(string) +
           "\">" + std::string(value) + "</｜DSML｜parameter>";
  };
  // Well formed, as a baseline for the broken variants below.
  const ChatMessage ok = parse_completion(calls + param("a", "false", "[1, 2]") + end, kChat);
  ASSERT_EQ(ok.tool_calls.size(), 1u);
  EXPECT_EQ(ok.tool_calls[0].arguments_text(), "{\"a\": [1, 2]}");

  expect_format_error(
      calls + param("a", "false", "[1, 2") + end, kChat,
      "parameter \"a\" of tool call \"f\" has string=\"false\" but its value is not JSON");
  // A number beyond a double is refused like any bad JSON (nlohmann throws out_of_range for it).
  expect_format_error(calls + param("a", "false", "1e400") + end, kChat,
                      "parameter \"a\" of tool call \"f\" has string=\"false\" but its value is not JSON");
  expect_format_error(calls + param("a", "maybe", "x") + end, kChat,
                      "string must be \"true\" or \"false\"");
  expect_format_error(calls + param("a", "true", "x") + "\n" + param("a", "true", "y") + end, kChat,
                      "duplicate parameter \"a\"");
  expect_format_error(calls + param("a", "true", "x") + end.substr(0, 10), kChat,
                      "expected \"</｜DSML｜invoke\"");
  expect_format_error(
      "c\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nome=\"f\">\n" + param("a", "true", "x") + end,
      kChat, "expected name=\"...\"");
  expect_format_error("c\n\n<｜DSML｜tool_calls>\nstray\n</｜DSML｜tool_calls>", kChat,
                      "expected <｜DSML｜invoke or </｜DSML｜tool_calls>");
}

// ---- Errors in request JSON -------------------------------------------------------------------

void expect_message_error(std::string_view json, const std::string& fragment) {
  try {
    parse(json);
    ADD_FAILURE() << "no error for: " << json;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << fragment << "\"";
  }
}

TEST(ChatMessages, ErrorsNameTheMessageAndField) {
  expect_message_error(R"({"role": "user"})", "messages: expected an array");
  expect_message_error(R"([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])",
                       "messages[1].role: unknown role \"robot\"");
  expect_message_error(R"([{"content": "a"}])", "messages[0].role: missing");
  expect_message_error(R"([{"role": "system", "content": "s"}, {"role": "user"}])",
                       "messages[1].content: missing");
  expect_message_error(R"([{"role": "user", "content": 5}])",
                       "messages[0].content: expected a string, got number");
  expect_message_error(R"([{"role": "tool"}])", "messages[0].content: missing");
  expect_message_error(
      R"([{"role": "user", "content": "u"}, {"role": "assistant", "tool_calls": [
          {"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
          {"type": "function", "function": {"name": "f", "arguments": "{\"a\": "}}]}])",
      "messages[1].tool_calls[1].function.arguments: not valid JSON");
  expect_message_error(
      R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1e400}"}}]}])",
      "messages[0].tool_calls[0].function.arguments: not valid JSON");
  expect_message_error(
      R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}])",
      "messages[0].tool_calls[0].function.arguments: expected a JSON object, got array");
  expect_message_error(
      R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])",
      "messages[0].tool_calls[0].function.name: missing");
  expect_message_error(R"([{"role": "user", "content": "u", "tools": []}])",
                       "messages[0].tools: only system and developer messages carry tools");
  expect_message_error(R"([{"role": "system", "content": "s", "tools": [{"type": "function"}]}])",
                       "messages[0].tools[0].function: missing");
  expect_message_error(R"([{"role": "user", "content": "u", "task": "dance"}])",
                       "messages[0].task: unknown task \"dance\"");
}

TEST(ChatMessages, EncoderRejectsAnEmptyDeveloperMessage) {
  const auto messages =
      parse(R"([{"role": "user", "content": "u"}, {"role": "developer", "content": ""}])");
  try {
    encode_chat_prompt(messages);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].content"), std::string::npos) << e.what();
  }
}

TEST(ChatMessages, ToolsErrorsNameTheTool) {
  try {
    parse_chat_tools(ordered_json::parse(
        R"([{"type": "function", "function": {"name": "f"}}, {"function": {}}])"));
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tools[1].function.name: missing"), std::string::npos)
        << e.what();
  }
}

// ---- Special token ids ------------------------------------------------------------------------

TEST(ChatSpecialTokenIds, ResolvedThroughTheLookup) {
  std::map<std::string, int32_t, std::less<>> vocab;
  const std::string_view names[] = {chat_token::kBos,
                                    chat_token::kEos,
                                    chat_token::kUser,
                                    chat_token::kAssistant,
                                    chat_token::kLatestReminder,
                                    chat_token::kThinkBegin,
                                    chat_token::kThinkEnd,
                                    chat_token::kDsml};
  int32_t next_id = 100;
  for (std::string_view name : names) vocab.emplace(name, next_id++);
  for (size_t t = 0; t < kNumChatTasks; ++t)
    vocab.emplace(chat_task_token(static_cast<ChatTask>(t)), next_id++);
  const auto lookup = [&](std::string_view token) -> std::optional<int32_t> {
    const auto it = vocab.find(token);
    return it == vocab.end() ? std::nullopt : std::optional<int32_t>(it->second);
  };

  const ChatSpecialTokens ids = resolve_chat_special_tokens(lookup);
  EXPECT_EQ(ids.bos, 100);
  EXPECT_EQ(ids.eos, 101);
  EXPECT_EQ(ids.user, 102);
  EXPECT_EQ(ids.assistant, 103);
  EXPECT_EQ(ids.latest_reminder, 104);
  EXPECT_EQ(ids.think_begin, 105);
  EXPECT_EQ(ids.think_end, 106);
  EXPECT_EQ(ids.dsml, 107);
  EXPECT_EQ(ids.tasks[static_cast<size_t>(ChatTask::kAction)], 108);
  EXPECT_EQ(ids.tasks[static_cast<size_t>(ChatTask::kReadUrl)], 113);

  vocab.erase(std::string(chat_token::kThinkEnd));
  try {
    resolve_chat_special_tokens(lookup);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("no token \"</think>\""), std::string::npos) << e.what();
  }
}

TEST(ChatSpecialTokenIds, MatchDeepSeekV4Tokenizer) {
  const std::filesystem::path path = DSV4_TOKENIZER_JSON;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent; run scripts/setup.sh";
  // Plain json: ordered_json's linear-time key lookup makes the 128k-entry vocab slow to parse.
  const nlohmann::json tokenizer = nlohmann::json::parse(read_file(path.string()));
  std::map<std::string, int32_t, std::less<>> added;
  for (const nlohmann::json& token : tokenizer.at("added_tokens")) {
    added.emplace(token.at("content").get<std::string>(), token.at("id").get<int32_t>());
  }
  const ChatSpecialTokens ids =
      resolve_chat_special_tokens([&](std::string_view text) -> std::optional<int32_t> {
        const auto it = added.find(text);
        return it == added.end() ? std::nullopt : std::optional<int32_t>(it->second);
      });
  EXPECT_EQ(ids.bos, 0);
  EXPECT_EQ(ids.eos, 1);
  EXPECT_EQ(ids.user, 128803);
  EXPECT_EQ(ids.assistant, 128804);
  EXPECT_EQ(ids.think_begin, 128821);
  EXPECT_EQ(ids.think_end, 128822);
  EXPECT_EQ(ids.dsml, 128825);
  EXPECT_EQ(ids.latest_reminder, 128828);
  EXPECT_EQ(ids.tasks[static_cast<size_t>(ChatTask::kAction)], 128829);
  EXPECT_EQ(ids.tasks[static_cast<size_t>(ChatTask::kReadUrl)], 128845);
}

}  // namespace
}  // namespace dsv4
