// The streaming completion parser; see completion_stream.h. Each state looks at buf_ (the text
// not yet decided), consumes what it can decide and emits it; whatever might still be the start
// of a marker stays in buf_ until more text or the end decides it.
#include "server/completion_stream.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/python_json.h"

namespace dsv4::server {
namespace {

namespace tok = chat_token;

const std::string kDsml(tok::kDsml);
const std::string kBlockBegin = "<" + kDsml + "tool_calls";
const std::string kBlockEnd = "</" + kDsml + "tool_calls>";
const std::string kInvokeBegin = "<" + kDsml + "invoke";
const std::string kInvokeEnd = "</" + kDsml + "invoke>";
const std::string kParamBegin = "<" + kDsml + "parameter";
const std::string kParamEnd = "</" + kDsml + "parameter>";
// The encoder separates the content from a tool-call block by a blank line.
constexpr size_t kBlockSeparatorNewlines = 2;

// The length of the longest suffix of `text` that is a proper prefix of `marker`: the part that
// may yet become the marker.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t length = std::min(text.size(), marker.size() - 1); length > 0; --length) {
    if (marker.starts_with(text.substr(text.size() - length))) return length;
  }
  return 0;
}

// Text as the inside of a JSON string, as Python's json.dumps writes it (byte by byte, so
// pieces escaped apart join to the whole escaped at once).
std::string json_string_body(std::string_view text) {
  const std::string quoted = python_json_dumps(nlohmann::ordered_json(std::string(text)));
  return quoted.substr(1, quoted.size() - 2);
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Returns the value of `attribute="..."` at the start of `text` (after spaces) and moves past
// it, or nullopt.
std::optional<std::string> read_attribute(std::string_view& text, std::string_view attribute) {
  size_t at = 0;
  while (at < text.size() && is_space(text[at])) ++at;
  text.remove_prefix(at);
  if (!text.starts_with(attribute) || !text.substr(attribute.size()).starts_with("=\"")) {
    return std::nullopt;
  }
  text.remove_prefix(attribute.size() + 2);
  const size_t end = text.find('"');
  if (end == std::string_view::npos) return std::nullopt;
  std::string value(text.substr(0, end));
  text.remove_prefix(end + 1);
  return value;
}

}  // namespace

void ParsedCompletion::add(const CompletionDelta& delta) {
  if (!delta.reasoning.empty()) reasoning = reasoning.value_or("") + delta.reasoning;
  content += delta.content;
  for (const ToolCallDelta& call : delta.tool_calls) {
    if (call.index >= tool_calls.size()) tool_calls.resize(call.index + 1);
    if (call.name) tool_calls[call.index].name = *call.name;
    tool_calls[call.index].arguments += call.arguments;
  }
}

CompletionStreamParser::CompletionStreamParser(ThinkingMode mode, bool parse_tool_calls)
    : mode_(mode),
      parse_tool_calls_(parse_tool_calls),
      state_(mode == ThinkingMode::kThinking ? State::kReasoning : State::kContent) {}

CompletionDelta CompletionStreamParser::feed(std::string_view text) {
  buf_.append(text);
  CompletionDelta out;
  while (step(false, out)) {
  }
  return out;
}

CompletionDelta CompletionStreamParser::finish() {
  CompletionDelta out;
  while (step(true, out)) {
  }
  close_arguments(out);
  buf_.clear();
  state_ = State::kDone;
  return out;
}

void CompletionStreamParser::emit_arguments(CompletionDelta& out, std::string_view piece) {
  if (piece.empty()) return;
  const size_t index = calls_ - 1;
  if (!out.tool_calls.empty() && out.tool_calls.back().index == index) {
    out.tool_calls.back().arguments += piece;
  } else {
    out.tool_calls.push_back({index, std::nullopt, std::string(piece)});
  }
}

void CompletionStreamParser::close_arguments(CompletionDelta& out) {
  if (!call_open_) return;
  if (state_ == State::kStringValue) emit_arguments(out, "\"");
  emit_arguments(out, params_in_call_ == 0 ? "{}" : "}");
  call_open_ = false;
}

void CompletionStreamParser::go_raw(CompletionDelta& out) {
  close_arguments(out);
  state_ = State::kRaw;
}

bool CompletionStreamParser::step(bool at_end, CompletionDelta& out) {
  const std::string_view buf = buf_;
  // Consumes the first n bytes of buf_.
  const auto consume = [this](size_t n) { buf_.erase(0, n); };
  // Skips whitespace between DSML tags; false when only whitespace (or nothing) is left.
  const auto skip_space = [&]() {
    size_t at = 0;
    while (at < buf_.size() && is_space(buf_[at])) ++at;
    consume(at);
    return !buf_.empty();
  };
  // Which of `tags` buf_ starts with (its index), -1 while buf_ is a prefix of one of them
  // (undecided), -2 when it matches none.
  const auto match_tag = [this](std::initializer_list<std::string_view> tags) {
    const std::string_view text = buf_;
    int index = 0;
    bool undecided = false;
    for (std::string_view tag : tags) {
      if (text.starts_with(tag)) return index;
      undecided = undecided || tag.starts_with(text);
      ++index;
    }
    return undecided ? -1 : -2;
  };

  switch (state_) {
    case State::kReasoning: {
      const size_t end = buf.find(tok::kThinkEnd);
      const size_t eos = buf.find(tok::kEos);
      if (end != std::string_view::npos && end <= eos) {
        out.reasoning += buf.substr(0, end);
        consume(end + tok::kThinkEnd.size());
        state_ = State::kContent;
        return true;
      }
      if (eos != std::string_view::npos) {
        out.reasoning += buf.substr(0, eos);
        buf_.clear();
        state_ = State::kDone;
        return false;
      }
      const size_t held =
          at_end ? 0 : std::max(partial_marker(buf, tok::kThinkEnd), partial_marker(buf, tok::kEos));
      out.reasoning += buf.substr(0, buf.size() - held);
      consume(buf.size() - held);
      return false;
    }

    case State::kContent: {
      const size_t block = parse_tool_calls_ ? buf.find(kBlockBegin) : std::string_view::npos;
      const size_t eos = buf.find(tok::kEos);
      if (block != std::string_view::npos && block < eos) {
        size_t content_end = block;
        for (size_t n = 0; n < kBlockSeparatorNewlines && content_end > 0 &&
                           buf[content_end - 1] == '\n';
             ++n) {
          --content_end;
        }
        out.content += buf.substr(0, content_end);
        consume(block + kBlockBegin.size());
        state_ = State::kBlockOpen;
        return true;
      }
      if (eos != std::string_view::npos) {
        out.content += buf.substr(0, eos);
        buf_.clear();
        state_ = State::kDone;
        return false;
      }
      size_t emit_end = buf.size();
      if (!at_end) {
        size_t held = partial_marker(buf, tok::kEos);
        if (parse_tool_calls_) {
          held = std::max(held, partial_marker(buf, kBlockBegin));
          // The newlines before a possible block are its separator, not content, if it comes.
          for (size_t n = 0; n < kBlockSeparatorNewlines && held < buf.size() &&
                             buf[buf.size() - held - 1] == '\n';
               ++n) {
            ++held;
          }
        }
        emit_end -= held;
      }
      out.content += buf.substr(0, emit_end);
      consume(emit_end);
      return false;
    }

    case State::kBlockOpen:
      if (buf.empty()) return false;
      if (buf[0] != '>') {
        go_raw(out);
        return true;
      }
      consume(1);
      state_ = State::kBlockBody;
      return true;

    case State::kBlockBody: {
      if (!skip_space()) return false;
      const int tag = match_tag({kInvokeBegin, kBlockEnd});
      if (tag == -1) return false;  // at the end: a cut-off tag, dropped
      if (tag == -2) {
        go_raw(out);
      } else if (tag == 0) {
        consume(kInvokeBegin.size());
        state_ = State::kInvokeHead;
      } else {
        consume(kBlockEnd.size());
        state_ = State::kContent;  // after the block: the end of sentence, or more text
      }
      return true;
    }

    case State::kInvokeHead: {
      const size_t close = buf.find("\">");
      if (close == std::string_view::npos) return false;  // at the end: no call started
      std::string_view head = buf.substr(0, close + 1);
      const std::optional<std::string> name = read_attribute(head, "name");
      if (!name || !std::all_of(head.begin(), head.end(), is_space)) {
        go_raw(out);
        return true;
      }
      consume(close + 2);
      out.tool_calls.push_back({calls_, *name, ""});
      ++calls_;
      params_in_call_ = 0;
      call_open_ = true;
      state_ = State::kInvokeBody;
      return true;
    }

    case State::kInvokeBody: {
      if (!skip_space()) return false;
      const int tag = match_tag({kParamBegin, kInvokeEnd});
      if (tag == -1) return false;
      if (tag == -2) {
        go_raw(out);
      } else if (tag == 0) {
        consume(kParamBegin.size());
        state_ = State::kParamHead;
      } else {
        consume(kInvokeEnd.size());
        close_arguments(out);
        state_ = State::kBlockBody;
      }
      return true;
    }

    case State::kParamHead: {
      const size_t close = buf.find("\">");
      if (close == std::string_view::npos) return false;
      std::string_view head = buf.substr(0, close + 1);
      const std::optional<std::string> key = read_attribute(head, "name");
      const std::optional<std::string> is_string =
          key ? read_attribute(head, "string") : std::nullopt;
      if (!is_string || (*is_string != "true" && *is_string != "false") ||
          !std::all_of(head.begin(), head.end(), is_space)) {
        go_raw(out);
        return true;
      }
      consume(close + 2);
      emit_arguments(out, params_in_call_ == 0 ? "{" : ", ");
      emit_arguments(out, python_json_dumps(nlohmann::ordered_json(*key)) + ": ");
      ++params_in_call_;
      if (*is_string == "true") {
        emit_arguments(out, "\"");
        state_ = State::kStringValue;
      } else {
        state_ = State::kJsonValue;
      }
      return true;
    }

    case State::kStringValue: {
      const size_t end = buf.find(kParamEnd);
      if (end != std::string_view::npos) {
        emit_arguments(out, json_string_body(buf.substr(0, end)) + "\"");
        consume(end + kParamEnd.size());
        state_ = State::kInvokeBody;
        return true;
      }
      const size_t held = at_end ? 0 : partial_marker(buf, kParamEnd);
      emit_arguments(out, json_string_body(buf.substr(0, buf.size() - held)));
      consume(buf.size() - held);
      return false;
    }

    case State::kJsonValue: {
      size_t end = buf.find(kParamEnd);
      if (end == std::string_view::npos) {
        if (!at_end) return false;
        end = buf.size();  // cut off: the value as far as it goes
      }
      const std::string_view raw = buf.substr(0, end);
      nlohmann::ordered_json value;
      try {
        value = nlohmann::ordered_json::parse(raw);
      } catch (const nlohmann::ordered_json::exception&) {
        value = std::string(raw);  // not JSON: kept as the string the model wrote
      }
      emit_arguments(out, python_json_dumps(value));
      consume(std::min(buf.size(), end + kParamEnd.size()));
      state_ = State::kInvokeBody;
      return true;
    }

    case State::kRaw:
      out.content += buf;
      buf_.clear();
      return false;

    case State::kDone:
      buf_.clear();
      return false;
  }
  return false;
}

ParsedCompletion parse_completion_text(std::string_view text, ThinkingMode mode,
                                       bool parse_tool_calls) {
  CompletionStreamParser parser(mode, parse_tool_calls);
  ParsedCompletion parsed;
  if (mode == ThinkingMode::kThinking) parsed.reasoning = "";
  parsed.add(parser.feed(text));
  parsed.add(parser.finish());
  return parsed;
}

}  // namespace dsv4::server
