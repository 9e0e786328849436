// The assistant's completion text, parsed while it streams: DeepSeek-V4's reasoning (up to
// </think>), content, and DSML tool calls (chat_encoding.h shows the layout) become OpenAI deltas
// of reasoning_content, content and tool_calls. Text that might still be the start of a marker
// (</think>, <｜DSML｜..., the end-of-sentence token, the blank line before a tool-call block) is
// held back until the next text decides it, so no marker reaches content or arguments however
// the text is cut into chunks. Tool-call arguments stream as pieces of the JSON object text:
// string parameters character by character, JSON parameters whole once their end is seen.
//
// Unlike parse_completion (chat_encoding.h), which is strict and throws, this parser never
// fails: a model's output is whatever it is. Malformed DSML turns the rest of the text into
// content (an open call's arguments are closed first, so they stay a JSON object), a
// string="false" value that is not JSON becomes a JSON string, and output cut off mid-call is
// closed at finish(). The result depends only on the text, never on the chunking: the
// non-streaming response is parse_completion_text(), the same parser fed at once. The text is
// expected as UTF-8 (the engine's decoder gives whole characters); invalid bytes pass through
// as they are, and the response's JSON writer replaces them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_encoding.h"

namespace dsv4::server {

struct ToolCallDelta {
  size_t index = 0;                 // the call's position in the completion, from 0
  std::optional<std::string> name;  // set on the call's first delta only
  std::string arguments;            // the next piece of function.arguments
  bool operator==(const ToolCallDelta&) const = default;
};

// What one piece of text added. Reasoning comes before content in the text; a delta may carry
// both (and tool calls) when one piece crosses a boundary.
struct CompletionDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;  // in order; pieces of one call are merged
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
  bool operator==(const ParsedToolCall&) const = default;
};

// A whole completion: the deltas added up.
struct ParsedCompletion {
  std::optional<std::string> reasoning;  // set in thinking mode
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  void add(const CompletionDelta& delta);
  bool operator==(const ParsedCompletion&) const = default;
};

class CompletionStreamParser {
 public:
  // `mode`: where the completion starts (kThinking: in the reasoning). `parse_tool_calls`: the
  // request offered tools; without it DSML stays content, as the model wrote it.
  CompletionStreamParser(ThinkingMode mode, bool parse_tool_calls);

  // The delta that `text` completes (possibly empty).
  CompletionDelta feed(std::string_view text);
  // The end of the completion: held text is resolved and an open call is closed.
  CompletionDelta finish();

  ThinkingMode mode() const { return mode_; }
  size_t tool_calls_started() const { return calls_; }

 private:
  enum class State {
    kReasoning,    // before </think>
    kContent,      // plain text, watching for a tool-call block and the end of sentence
    kBlockOpen,    // "<｜DSML｜tool_calls" read; its ">" next
    kBlockBody,    // inside the block: an invoke or the block's end next
    kInvokeHead,   // "<｜DSML｜invoke" read: ` name="...">` next
    kInvokeBody,   // a parameter or the invoke's end next
    kParamHead,    // "<｜DSML｜parameter" read: ` name="..." string="...">` next
    kStringValue,  // a string="true" value, streamed
    kJsonValue,    // a string="false" value, held whole
    kRaw,          // after malformed DSML: everything is content
    kDone,         // after the end of sentence: the rest is ignored
  };

  // Moves forward as far as the text in buf_ decides; returns false when it needs more.
  bool step(bool at_end, CompletionDelta& out);
  void emit_arguments(CompletionDelta& out, std::string_view piece);
  void close_arguments(CompletionDelta& out);
  void go_raw(CompletionDelta& out);

  ThinkingMode mode_;
  bool parse_tool_calls_;
  State state_;
  std::string buf_;  // text received but not yet decided
  size_t calls_ = 0;
  size_t params_in_call_ = 0;
  bool call_open_ = false;
};

// The whole completion at once: feed(text) then finish(), added up.
ParsedCompletion parse_completion_text(std::string_view text, ThinkingMode mode,
                                       bool parse_tool_calls);

}  // namespace dsv4::server
