// The streaming completion parser: the same text cut any way gives the same reasoning, content
// and tool calls as the text at once, and as chat_encoding's strict parser; the bug classes
// other servers shipped (named by their vLLM issue) each have a golden case here.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/completion_stream.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4::server {
namespace {

using nlohmann::ordered_json;
constexpr auto kThinking = ThinkingMode::kThinking;
constexpr auto kChat = ThinkingMode::kChat;
const std::string kEos(chat_token::kEos);

// The deltas of `text` fed in pieces ending at `cuts` (increasing byte offsets).
std::vector<CompletionDelta> stream_deltas(std::string_view text, const std::vector<size_t>& cuts,
                                           ThinkingMode mode, bool tools) {
  CompletionStreamParser parser(mode, tools);
  std::vector<CompletionDelta> deltas;
  size_t from = 0;
  for (const size_t cut : cuts) {
    deltas.push_back(parser.feed(text.substr(from, cut - from)));
    from = cut;
  }
  deltas.push_back(parser.feed(text.substr(from)));
  deltas.push_back(parser.finish());
  return deltas;
}

ParsedCompletion add_up(const std::vector<CompletionDelta>& deltas, ThinkingMode mode) {
  ParsedCompletion parsed;
  if (mode == kThinking) parsed.reasoning = "";
  for (const CompletionDelta& delta : deltas) parsed.add(delta);
  return parsed;
}

std::string describe(const ParsedCompletion& p) {
  std::string out = "reasoning=[" + p.reasoning.value_or("<none>") + "] content=[" + p.content + "]";
  for (const ParsedToolCall& call : p.tool_calls) out += " call " + call.name + " " + call.arguments;
  return out;
}

// Every way of cutting the text in two, and one byte at a time, gives the whole text's result.
void expect_chunking_independent(std::string_view text, ThinkingMode mode, bool tools) {
  const ParsedCompletion whole = parse_completion_text(text, mode, tools);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const ParsedCompletion split = add_up(stream_deltas(text, {cut}, mode, tools), mode);
    ASSERT_EQ(split, whole) << "cut at byte " << cut << ": " << describe(split) << " vs "
                            << describe(whole);
  }
  std::vector<size_t> every_byte;
  for (size_t cut = 1; cut < text.size(); ++cut) every_byte.push_back(cut);
  EXPECT_EQ(add_up(stream_deltas(text, every_byte, mode, tools), mode), whole);
  // Random cuts into up to 12 pieces, 200 times (seeded: a failure repeats).
  std::mt19937 random(1234);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> cuts;
    const size_t pieces = 1 + random() % 12;
    for (size_t i = 0; i < pieces; ++i) cuts.push_back(random() % (text.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    ASSERT_EQ(add_up(stream_deltas(text, cuts, mode, tools), mode), whole) << "trial " << trial;
  }
}

// A completion the encoder itself writes for a reply with reasoning, content and two calls.
ChatMessage reply_with_calls() {
  ChatMessage reply;
  reply.role = ChatRole::kAssistant;
  reply.reasoning_content = "Two tools; 中文 reasoning.\nSecond line with </thin and <｜DS.";
  reply.content = "Calling them.\n";
  reply.tool_calls.push_back(
      {"", "search",
       ordered_json::parse(R"({"query": "a \"quoted\" <b>x</b>\nline", "n": 3, "ratio": 0.25,
                               "flags": [true, null], "nested": {"k": "中", "e": {}}})")});
  reply.tool_calls.push_back({"", "noop", ordered_json::object()});
  return reply;
}

std::string encoded_completion(const ChatMessage& reply, ThinkingMode mode) {
  ChatMessage user;
  user.role = ChatRole::kUser;
  user.content = "u";
  std::vector<ChatMessage> history = {user};
  ChatEncodeOptions options;
  options.mode = mode;
  const std::string prompt = encode_chat_prompt(history, options);
  history.push_back(reply);
  return encode_chat_prompt(history, options).substr(prompt.size());
}

TEST(CompletionStream, AgreesWithTheStrictParserOnEncoderOutput) {
  for (const ThinkingMode mode : {kThinking, kChat}) {
    SCOPED_TRACE(mode == kThinking ? "thinking" : "chat");
    const std::string text = encoded_completion(reply_with_calls(), mode);
    const ChatMessage strict = parse_completion(text, mode);
    const ParsedCompletion parsed = parse_completion_text(text, mode, true);
    EXPECT_EQ(parsed.reasoning, strict.reasoning_content);
    EXPECT_EQ(parsed.content, strict.content);
    ASSERT_EQ(parsed.tool_calls.size(), strict.tool_calls.size());
    for (size_t i = 0; i < strict.tool_calls.size(); ++i) {
      EXPECT_EQ(parsed.tool_calls[i].name, strict.tool_calls[i].name);
      EXPECT_EQ(parsed.tool_calls[i].arguments, strict.tool_calls[i].arguments_text());
    }
  }
}

TEST(CompletionStream, EveryChunkingGivesTheWholeTextsResult) {
  const std::string with_calls = encoded_completion(reply_with_calls(), kThinking);
  expect_chunking_independent(with_calls, kThinking, true);
  expect_chunking_independent(encoded_completion(reply_with_calls(), kChat), kChat, true);
  // Without tools offered the DSML is content, cut any way.
  expect_chunking_independent(with_calls, kThinking, false);
  // Malformed and cut-off DSML.
  expect_chunking_independent("a\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                              "<｜DSML｜parameter name=\"x\" string=\"maybe\">1</｜DSML｜parameter>",
                              kChat, true);
  expect_chunking_independent("a\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                              "<｜DSML｜parameter name=\"x\" string=\"true\">cut off",
                              kChat, true);
}

// vLLM #45877: a marker cut across two deltas leaked its first half into the content. Every
// two-piece cut of a completion whose content is followed by a tool-call block and the end of
// sentence must stream exactly the content: streamed text cannot be taken back, so any leaked
// marker byte would show in the concatenation.
TEST(CompletionStream, MarkersSplitAcrossDeltasNeverLeakIntoContent) {
  const std::string text = encoded_completion(reply_with_calls(), kChat);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    std::string content;
    for (const CompletionDelta& delta : stream_deltas(text, {cut}, kChat, true)) {
      content += delta.content;
    }
    ASSERT_EQ(content, "Calling them.\n") << "cut at byte " << cut;
  }
  // The end-of-sentence token too, in content without tools.
  const std::string plain = "Hello <b>world</b>" + kEos;
  for (size_t cut = 0; cut <= plain.size(); ++cut) {
    std::string content;
    for (const CompletionDelta& delta : stream_deltas(plain, {cut}, kChat, false)) {
      content += delta.content;
    }
    ASSERT_EQ(content, "Hello <b>world</b>") << "cut at byte " << cut;
  }
}

// vLLM #53227: tool-call arguments came only at the end (or were re-sent whole). Fed a byte at a
// time, a string parameter's arguments must arrive in many pieces as the value streams, every
// piece free of DSML, and the pieces must join to the call's JSON.
TEST(CompletionStream, ToolCallArgumentsStreamAsTheValueArrives) {
  const std::string text =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write\">\n"
      "<｜DSML｜parameter name=\"path\" string=\"true\">/tmp/a.txt</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"body\" string=\"true\">line one\nline \"two\"</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"mode\" string=\"false\">{\"append\":true}</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos;
  std::vector<size_t> every_byte;
  for (size_t cut = 1; cut < text.size(); ++cut) every_byte.push_back(cut);
  size_t pieces = 0;
  std::string arguments;
  std::optional<std::string> name;
  for (const CompletionDelta& delta : stream_deltas(text, every_byte, kChat, true)) {
    EXPECT_TRUE(delta.content.empty()) << delta.content;
    for (const ToolCallDelta& call : delta.tool_calls) {
      EXPECT_EQ(call.index, 0u);
      if (call.name) name = call.name;
      EXPECT_EQ(call.arguments.find("DSML"), std::string::npos) << call.arguments;
      if (!call.arguments.empty()) ++pieces;
      arguments += call.arguments;
    }
  }
  EXPECT_EQ(name, "write");
  EXPECT_GT(pieces, 20u) << "arguments were not streamed";
  EXPECT_EQ(arguments,
            R"({"path": "/tmp/a.txt", "body": "line one\nline \"two\"", "mode": {"append": true}})");
  EXPECT_EQ(ordered_json::parse(arguments)["body"], "line one\nline \"two\"");
}

// vLLM #40801: "</think>" cut in two ended up half in the reasoning and half in the content.
TEST(CompletionStream, ReasoningEndMarkerSplitStaysOutOfBothFields) {
  const std::string text = "I think so </ not yet.</think>The answer." + kEos;
  const size_t marker = text.find("</think>");
  for (size_t cut = marker; cut <= marker + 8; ++cut) {
    const auto deltas = stream_deltas(text, {cut}, kThinking, false);
    const ParsedCompletion parsed = add_up(deltas, kThinking);
    EXPECT_EQ(parsed.reasoning, "I think so </ not yet.") << "cut at " << cut;
    EXPECT_EQ(parsed.content, "The answer.") << "cut at " << cut;
    // Reasoning is complete before any content is sent.
    bool content_seen = false;
    for (const CompletionDelta& delta : deltas) {
      EXPECT_FALSE(content_seen && !delta.reasoning.empty());
      content_seen = content_seen || !delta.content.empty();
    }
  }
}

// vLLM #45862: text after a tool-call block was dropped or glued onto the last call's
// arguments. It must come out as content, and the calls stay whole.
TEST(CompletionStream, ContentAfterToolCallsIsContent) {
  const std::string text =
      "Before.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>After." + kEos;
  const ParsedCompletion parsed = parse_completion_text(text, kChat, true);
  EXPECT_EQ(parsed.content, "Before.After.");
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].arguments, R"({"a": 1})");
  expect_chunking_independent(text, kChat, true);
}

TEST(CompletionStream, EndOfSentenceEndsTheCompletion) {
  EXPECT_EQ(parse_completion_text("r</think>c" + kEos + "ignored", kThinking, false),
            (ParsedCompletion{"r", "c", {}}));
  EXPECT_EQ(parse_completion_text("r only" + kEos, kThinking, false),
            (ParsedCompletion{"r only", "", {}}));
}

TEST(CompletionStream, CutOffInsideACallClosesItsArguments) {
  const std::string head = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  const ParsedCompletion in_string = parse_completion_text(
      head + "<｜DSML｜parameter name=\"s\" string=\"true\">partial \"va", kChat, true);
  ASSERT_EQ(in_string.tool_calls.size(), 1u);
  EXPECT_EQ(in_string.tool_calls[0].arguments, R"({"s": "partial \"va"})");
  const ParsedCompletion in_json = parse_completion_text(
      head + "<｜DSML｜parameter name=\"j\" string=\"false\">[1, 2", kChat, true);
  EXPECT_EQ(in_json.tool_calls[0].arguments, R"({"j": "[1, 2"})");
  const ParsedCompletion no_params = parse_completion_text(head, kChat, true);
  EXPECT_EQ(no_params.tool_calls[0].arguments, "{}");
  // Cut inside the invoke's own tag: no call was started, nothing leaks.
  EXPECT_EQ(parse_completion_text("x<｜DSML｜tool_calls>\n<｜DSML｜invoke na", kChat, true),
            (ParsedCompletion{std::nullopt, "x", {}}));
}

TEST(CompletionStream, MalformedDsmlBecomesContentAfterClosingTheCall) {
  const ParsedCompletion parsed = parse_completion_text(
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\nstray text",
      kChat, true);
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].arguments, R"({"a": "x"})");
  EXPECT_EQ(parsed.content, "stray text");
  // A value marked string="false" that is not JSON is kept as a JSON string.
  const ParsedCompletion not_json = parse_completion_text(
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"a\" string=\"false\">not json</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
      kChat, true);
  EXPECT_EQ(not_json.tool_calls[0].arguments, R"({"a": "not json"})");
}

TEST(CompletionStream, WithoutToolsDsmlIsContent) {
  const std::string block = "\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>";
  EXPECT_EQ(parse_completion_text("c" + block, kChat, false).content, "c" + block);
}

TEST(CompletionStream, APrefilledNamedCallStartsTheCall) {
  // What a named tool_choice appends to the prompt, fed first as the server does.
  CompletionStreamParser parser(kChat, true);
  const CompletionDelta start =
      parser.feed("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n");
  EXPECT_TRUE(start.content.empty());
  ASSERT_EQ(start.tool_calls.size(), 1u);
  EXPECT_EQ(start.tool_calls[0].name, "get_weather");
  const CompletionDelta rest = parser.feed(
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos);
  std::string arguments;
  for (const ToolCallDelta& call : rest.tool_calls) arguments += call.arguments;
  EXPECT_EQ(arguments, R"({"city": "Paris"})");
  EXPECT_TRUE(parser.finish().empty());
}

}  // namespace
}  // namespace dsv4::server
