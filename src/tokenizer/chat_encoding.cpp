// DeepSeek-V4 chat prompt encoding and completion parsing; see chat_encoding.h. The rendering
// rules (turn order, transitions, dropped reasoning, DSML layout, JSON formatting) follow
// DeepSeek's reference encoder so the prompt is byte-identical to the one the model saw.
#include "tokenizer/chat_encoding.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "tokenizer/python_json.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;
namespace tok = chat_token;

constexpr std::array<std::string_view, 6> kRoleNames = {"system", "user",      "assistant",
                                                        "tool",   "developer", "latest_reminder"};
constexpr std::array<std::string_view, kNumChatTasks> kTaskNames = {"action", "query", "authority",
                                                                    "domain", "title", "read_url"};
constexpr std::array<std::string_view, kNumChatTasks> kTaskTokens = {
    "<｜action｜>", "<｜query｜>", "<｜authority｜>",
    "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"};

// The system-prompt section that lists the tools; {tool_schemas} is one JSON object per line.
constexpr std::string_view kToolsTemplate =
    R"(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<{dsml}tool_calls>" block like the following:

<{dsml}tool_calls>
<{dsml}invoke name="$TOOL_NAME">
<{dsml}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml}parameter>
...
</{dsml}invoke>
<{dsml}invoke name="$TOOL_NAME2">
...
</{dsml}invoke>
</{dsml}tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {think}), you MUST output your complete reasoning inside {think}...{/think} BEFORE any tool calls or final response.

Otherwise, output directly after {/think} with tool calls or final response.

### Available Tool Schemas

{tool_schemas}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
)";

constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

constexpr std::string_view kToolResultBegin = "<tool_result>";
constexpr std::string_view kToolResultEnd = "</tool_result>";

// DSML tags. Most lack their final ">": attributes follow an opening tag, and the parser checks
// the ">\n" after a closing one separately.
const std::string kToolCallsBegin = "<" + std::string(tok::kDsml) + "tool_calls";
const std::string kToolCallsEnd = "</" + std::string(tok::kDsml) + "tool_calls>";
const std::string kInvokeBegin = "<" + std::string(tok::kDsml) + "invoke";
const std::string kInvokeEnd = "</" + std::string(tok::kDsml) + "invoke";
const std::string kParameterBegin = "<" + std::string(tok::kDsml) + "parameter";
const std::string kParameterEnd = "</" + std::string(tok::kDsml) + "parameter";

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

std::string_view text_or_empty(const std::optional<std::string>& text) {
  return text ? std::string_view(*text) : std::string_view();
}

std::string json_type_name(const ordered_json& value) { return value.type_name(); }

// nlohmann's message without the "last read" bytes, which may end inside a UTF-8 character.
std::string describe_parse_error(const ordered_json::exception& error) {
  const std::string what = error.what();
  return what.substr(0, what.find("; last read"));
}

// ---------------------------------------------------------------------------------------------
// Reading messages and tools from JSON.

[[noreturn]] void fail_field(const std::string& where, std::string_view what) {
  throw FormatError(where + ": " + std::string(what));
}

std::optional<std::string> optional_string(const ordered_json& object, const char* key,
                                           const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) {
    fail_field(where + "." + key, "expected a string, got " + json_type_name(*it));
  }
  return it->get<std::string>();
}

std::string required_string(const ordered_json& object, const char* key, const std::string& where) {
  auto value = optional_string(object, key, where);
  if (!value) fail_field(where + "." + key, "missing");
  return std::move(*value);
}

ChatRole parse_role(const std::string& name, const std::string& where) {
  for (size_t i = 0; i < kRoleNames.size(); ++i) {
    if (kRoleNames[i] == name) return static_cast<ChatRole>(i);
  }
  fail_field(where,
             "unknown role \"" + name +
                 "\" (expected system, user, assistant, tool, developer or latest_reminder)");
}

ChatTask parse_task(const std::string& name, const std::string& where) {
  for (size_t i = 0; i < kTaskNames.size(); ++i) {
    if (kTaskNames[i] == name) return static_cast<ChatTask>(i);
  }
  fail_field(where, "unknown task \"" + name +
                        "\" (expected action, query, authority, domain, title or read_url)");
}

std::vector<ordered_json> parse_tools_at(const ordered_json& tools, const std::string& where) {
  if (!tools.is_array()) fail_field(where, "expected an array, got " + json_type_name(tools));
  std::vector<ordered_json> functions;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const ordered_json& tool = tools[i];
    if (!tool.is_object()) fail_field(at, "expected an object, got " + json_type_name(tool));
    const auto function = tool.find("function");
    if (function == tool.end()) fail_field(at + ".function", "missing");
    if (!function->is_object()) {
      fail_field(at + ".function", "expected an object, got " + json_type_name(*function));
    }
    required_string(*function, "name", at + ".function");
    functions.push_back(*function);
  }
  return functions;
}

// function.arguments is a JSON object, usually given as its text (OpenAI's format).
ordered_json parse_arguments(const ordered_json& arguments, const std::string& where) {
  ordered_json parsed;
  if (arguments.is_string()) {
    try {
      parsed = ordered_json::parse(arguments.get_ref<const std::string&>());
    } catch (const ordered_json::exception& e) {  // parse_error, or out_of_range for 1e400
      fail_field(where, "not valid JSON: " + describe_parse_error(e));
    }
  } else {
    parsed = arguments;
  }
  if (!parsed.is_object())
    fail_field(where, "expected a JSON object, got " + json_type_name(parsed));
  return parsed;
}

std::vector<ToolCall> parse_tool_calls(const ordered_json& calls, const std::string& where) {
  if (calls.is_null()) return {};
  if (!calls.is_array()) fail_field(where, "expected an array, got " + json_type_name(calls));
  std::vector<ToolCall> parsed;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const ordered_json& call = calls[i];
    if (!call.is_object()) fail_field(at, "expected an object, got " + json_type_name(call));
    const auto function = call.find("function");
    if (function == call.end()) fail_field(at + ".function", "missing");
    if (!function->is_object()) {
      fail_field(at + ".function", "expected an object, got " + json_type_name(*function));
    }
    ToolCall tool_call;
    // The reference also accepts the id inside "function".
    tool_call.id = optional_string(call, "id", at).value_or("");
    if (tool_call.id.empty()) {
      tool_call.id = optional_string(*function, "id", at + ".function").value_or("");
    }
    tool_call.name = required_string(*function, "name", at + ".function");
    const auto arguments = function->find("arguments");
    if (arguments == function->end()) fail_field(at + ".function.arguments", "missing");
    tool_call.arguments = parse_arguments(*arguments, at + ".function.arguments");
    parsed.push_back(std::move(tool_call));
  }
  return parsed;
}

// A tool result's content: a string, or content parts whose text parts are joined by blank lines.
std::string parse_tool_content(const ordered_json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    fail_field(where, "expected a string or an array of parts, got " + json_type_name(content));
  }
  std::string joined;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const ordered_json& part = content[i];
    if (!part.is_object()) fail_field(at, "expected an object, got " + json_type_name(part));
    const std::string type = required_string(part, "type", at);
    if (i > 0) joined += "\n\n";
    if (type == "text") {
      joined += optional_string(part, "text", at).value_or("");
    } else {
      joined += "[Unsupported " + type + "]";
    }
  }
  return joined;
}

bool has_field(const ordered_json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && !it->is_null();
}

ChatMessage parse_message(const ordered_json& json, const std::string& where) {
  if (!json.is_object()) fail_field(where, "expected an object, got " + json_type_name(json));
  ChatMessage message;
  message.role = parse_role(required_string(json, "role", where), where + ".role");
  const ChatRole role = message.role;

  switch (role) {
    case ChatRole::kSystem:
    case ChatRole::kAssistant: message.content = optional_string(json, "content", where); break;
    case ChatRole::kUser:
    case ChatRole::kDeveloper:
    case ChatRole::kLatestReminder:
      message.content = required_string(json, "content", where);
      break;
    case ChatRole::kTool:
      if (!has_field(json, "content")) fail_field(where + ".content", "missing");
      message.content = parse_tool_content(json["content"], where + ".content");
      message.tool_call_id = optional_string(json, "tool_call_id", where);
      break;
  }

  if (role == ChatRole::kAssistant) {
    message.reasoning_content = optional_string(json, "reasoning_content", where);
    if (json.contains("tool_calls")) {
      message.tool_calls = parse_tool_calls(json["tool_calls"], where + ".tool_calls");
    }
    if (has_field(json, "wo_eos")) {
      if (!json["wo_eos"].is_boolean()) fail_field(where + ".wo_eos", "expected a boolean");
      message.without_eos = json["wo_eos"].get<bool>();
    }
  }

  const bool carries_instructions = role == ChatRole::kSystem || role == ChatRole::kDeveloper;
  if (has_field(json, "tools")) {
    if (!carries_instructions) {
      fail_field(where + ".tools", "only system and developer messages carry tools");
    }
    message.tools = parse_tools_at(json["tools"], where + ".tools");
  }
  if (has_field(json, "response_format")) {
    if (!carries_instructions) {
      fail_field(where + ".response_format",
                 "only system and developer messages carry a response format");
    }
    if (!json["response_format"].is_object()) {
      fail_field(where + ".response_format",
                 "expected an object, got " + json_type_name(json["response_format"]));
    }
    message.response_format = json["response_format"];
  }
  if (const auto task = optional_string(json, "task", where)) {
    if (!carries_instructions && role != ChatRole::kUser) {
      fail_field(where + ".task", "only user, developer and system messages carry a task");
    }
    message.task = parse_task(*task, where + ".task");
  }
  return message;
}

// ---------------------------------------------------------------------------------------------
// Rendering.

// One piece of a user turn: the user's own text or a tool's result.
struct UserBlock {
  bool is_tool_result = false;
  std::string_view text;
  std::string_view tool_call_id;
};

// A message as the encoder renders it: tool messages have become blocks of user turns.
struct Turn {
  ChatRole role;
  const ChatMessage* message;  // the message it came from (the first one, for merged turns)
  std::vector<UserBlock> blocks;
  std::optional<ChatTask> task;
};

bool is_user_like(ChatRole role) { return role == ChatRole::kUser || role == ChatRole::kDeveloper; }

// Tool results join the user turn before them (or start one); a user message joins a user turn
// before it unless that turn carries a task. A user message that joins keeps its text but not its
// task, as in the reference.
std::vector<Turn> merge_into_turns(std::span<const ChatMessage> messages) {
  std::vector<Turn> turns;
  for (const ChatMessage& message : messages) {
    const bool after_user = !turns.empty() && turns.back().role == ChatRole::kUser;
    if (message.role == ChatRole::kTool) {
      const UserBlock block{true, text_or_empty(message.content),
                            text_or_empty(message.tool_call_id)};
      if (after_user) {
        turns.back().blocks.push_back(block);
      } else {
        turns.push_back({ChatRole::kUser, &message, {block}, std::nullopt});
      }
    } else if (message.role == ChatRole::kUser) {
      const UserBlock block{false, text_or_empty(message.content), {}};
      if (after_user && !turns.back().task) {
        turns.back().blocks.push_back(block);
      } else {
        turns.push_back({ChatRole::kUser, &message, {block}, message.task});
      }
    } else {
      turns.push_back({message.role, &message, {}, message.task});
    }
  }
  return turns;
}

// Within each user turn, tool results follow the order of the latest assistant's calls
// (results whose id is unknown sort as the first call; ties keep their order).
void sort_tool_results(std::vector<Turn>& turns) {
  std::unordered_map<std::string_view, size_t> call_order;
  for (Turn& turn : turns) {
    if (turn.role == ChatRole::kAssistant && !turn.message->tool_calls.empty()) {
      call_order.clear();
      const auto& calls = turn.message->tool_calls;
      for (size_t i = 0; i < calls.size(); ++i) {
        if (!calls[i].id.empty()) call_order[calls[i].id] = i;
      }
      continue;
    }
    if (turn.role != ChatRole::kUser || call_order.empty()) continue;
    std::vector<UserBlock> results;
    for (const UserBlock& block : turn.blocks) {
      if (block.is_tool_result) results.push_back(block);
    }
    if (results.size() < 2) continue;
    const auto rank = [&](const UserBlock& block) {
      const auto it = call_order.find(block.tool_call_id);
      return it == call_order.end() ? size_t{0} : it->second;
    };
    std::stable_sort(results.begin(), results.end(),
                     [&](const UserBlock& a, const UserBlock& b) { return rank(a) < rank(b); });
    auto next = results.begin();
    for (UserBlock& block : turn.blocks) {
      if (block.is_tool_result) block = *next++;
    }
  }
}

// Index of the last user or developer turn, or -1.
std::ptrdiff_t last_user_turn(const std::vector<Turn>& turns) {
  for (std::ptrdiff_t i = std::ssize(turns) - 1; i >= 0; --i) {
    if (is_user_like(turns[static_cast<size_t>(i)].role)) return i;
  }
  return -1;
}

const std::string& tools_section_template() {
  static const std::string text =
      replace_all(replace_all(replace_all(std::string(kToolsTemplate), "{dsml}", tok::kDsml),
                              "{think}", tok::kThinkBegin),
                  "{/think}", tok::kThinkEnd);
  return text;
}

std::string render_tools(const std::vector<ordered_json>& tools) {
  std::string schemas;
  for (const ordered_json& tool : tools) {
    if (!schemas.empty()) schemas += '\n';
    schemas += python_json_dumps(tool);
  }
  return replace_all(tools_section_template(), "{tool_schemas}", schemas);
}

// Tools and response format follow a system or developer message's text, each after a blank line.
void append_instructions(std::string& out, const ChatMessage& message) {
  if (!message.tools.empty()) {
    out += "\n\n";
    out += render_tools(message.tools);
  }
  const auto& format = message.response_format;
  if (format && !format->empty()) {
    out += "\n\n";
    out += kResponseFormatPrefix;
    out += python_json_dumps(*format);
  }
}

std::string render_tool_calls(const std::vector<ToolCall>& calls) {
  std::string out = "\n\n" + kToolCallsBegin + ">\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += '\n';
    out += kInvokeBegin + " name=\"" + calls[i].name + "\">\n";
    bool first = true;
    for (const auto& [key, value] : calls[i].arguments.items()) {
      if (!first) out += '\n';
      first = false;
      const bool is_string = value.is_string();
      out += kParameterBegin + " name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") +
             "\">";
      out += is_string ? value.get<std::string>() : python_json_dumps(value);
      out += kParameterEnd + ">";
    }
    out += '\n' + kInvokeEnd + ">";
  }
  out += '\n' + kToolCallsEnd;
  return out;
}

class PromptRenderer {
 public:
  PromptRenderer(std::vector<Turn> turns, const ChatEncodeOptions& options, bool drop_thinking)
      : turns_(std::move(turns)),
        thinking_(options.mode == ThinkingMode::kThinking),
        drop_thinking_(drop_thinking),
        effort_(options.reasoning_effort),
        last_user_(last_user_turn(turns_)) {}

  void render(std::string& out) const {
    for (size_t i = 0; i < turns_.size(); ++i) render_turn(out, i);
  }

 private:
  // Reasoning is shown for every assistant turn, or only for those after the last user turn.
  bool shows_reasoning(size_t index) const {
    return !drop_thinking_ || static_cast<std::ptrdiff_t>(index) > last_user_;
  }

  void render_turn(std::string& out, size_t index) const {
    const Turn& turn = turns_[index];
    const ChatMessage& message = *turn.message;
    if (index == 0 && thinking_ && effort_ == ReasoningEffort::kMax) out += kReasoningEffortMax;

    switch (turn.role) {
      case ChatRole::kSystem:
        out += text_or_empty(message.content);
        append_instructions(out, message);
        break;
      case ChatRole::kDeveloper:
        out += tok::kUser;
        out += text_or_empty(message.content);
        append_instructions(out, message);
        break;
      case ChatRole::kUser:
        out += tok::kUser;
        for (size_t b = 0; b < turn.blocks.size(); ++b) {
          if (b > 0) out += "\n\n";
          const UserBlock& block = turn.blocks[b];
          if (block.is_tool_result) out += kToolResultBegin;
          out += block.text;
          if (block.is_tool_result) out += kToolResultEnd;
        }
        break;
      case ChatRole::kLatestReminder:
        out += tok::kLatestReminder;
        out += text_or_empty(message.content);
        break;
      case ChatRole::kAssistant: {
        // A turn answering a task (the task token was the last thing written) has no reasoning.
        const bool answers_task = index > 0 && turns_[index - 1].task.has_value();
        if (thinking_ && !answers_task && shows_reasoning(index)) {
          out += text_or_empty(message.reasoning_content);
          out += tok::kThinkEnd;
        }
        out += text_or_empty(message.content);
        if (!message.tool_calls.empty()) out += render_tool_calls(message.tool_calls);
        if (!message.without_eos) out += tok::kEos;
        break;
      }
      case ChatRole::kTool: break;  // merged into user turns
    }
    append_transition(out, index);
  }

  // What opens the assistant's reply, written after the last turn before an assistant turn (or
  // before a latest_reminder, or at the end of the conversation).
  void append_transition(std::string& out, size_t index) const {
    if (index + 1 < turns_.size()) {
      const ChatRole next = turns_[index + 1].role;
      if (next != ChatRole::kAssistant && next != ChatRole::kLatestReminder) return;
    }
    const Turn& turn = turns_[index];
    if (turn.task) {
      if (*turn.task == ChatTask::kAction) {
        out += tok::kAssistant;
        out += thinking_ ? tok::kThinkBegin : tok::kThinkEnd;
      }
      out += chat_task_token(*turn.task);
    } else if (is_user_like(turn.role)) {
      out += tok::kAssistant;
      const bool opens_thinking =
          thinking_ && (!drop_thinking_ || static_cast<std::ptrdiff_t>(index) >= last_user_);
      out += opens_thinking ? tok::kThinkBegin : tok::kThinkEnd;
    }
  }

  std::vector<Turn> turns_;
  bool thinking_;
  bool drop_thinking_;
  ReasoningEffort effort_;
  std::ptrdiff_t last_user_;
};

// What the types allow but the encoder cannot render, named by the caller's message index.
void check_renderable(std::span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const ChatMessage& message = messages[i];
    if (message.role == ChatRole::kDeveloper && text_or_empty(message.content).empty()) {
      fail_field(where + ".content", "a developer message needs non-empty content");
    }
    for (size_t c = 0; c < message.tool_calls.size(); ++c) {
      if (!message.tool_calls[c].arguments.is_object()) {
        fail_field(
            where + ".tool_calls[" + std::to_string(c) + "].function.arguments",
            "expected a JSON object, got " + json_type_name(message.tool_calls[c].arguments));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Parsing a completion.

class CompletionReader {
 public:
  explicit CompletionReader(std::string_view text) : text_(text) {}

  bool at_end() const { return pos_ == text_.size(); }

  // Reads up to the earliest of the stops and moves past it. Returns the text before it and the
  // stop's index, or -1 (and the rest of the text) when none occurs.
  std::pair<std::string_view, int> read_until(std::initializer_list<std::string_view> stops) {
    size_t best = std::string_view::npos;
    int which = -1;
    int i = 0;
    for (std::string_view stop : stops) {
      const size_t found = text_.find(stop, pos_);
      if (found < best) {
        best = found;
        which = i;
      }
      ++i;
    }
    const size_t end = which < 0 ? text_.size() : best;
    const std::string_view before = text_.substr(pos_, end - pos_);
    pos_ = which < 0 ? end : end + stops.begin()[which].size();
    return {before, which};
  }

  bool consume(std::string_view literal) {
    if (text_.substr(pos_).starts_with(literal)) {
      pos_ += literal.size();
      return true;
    }
    return false;
  }

  void expect(std::string_view literal) {
    if (!consume(literal)) fail("expected \"" + escape(literal) + "\"");
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
    // Up to 40 bytes of what was found, cut at a UTF-8 character boundary.
    size_t length = std::min<size_t>(40, text_.size() - pos);
    while (pos + length < text_.size() &&
           (static_cast<unsigned char>(text_[pos + length]) & 0xC0) == 0x80) {
      --length;
    }
    const std::string_view found = text_.substr(pos, length);
    throw FormatError("completion at byte " + std::to_string(pos) + ": " + what + ", found \"" +
                      escape(found) + (pos + found.size() < text_.size() ? "...\"" : "\""));
  }

  size_t position() const { return pos_; }

  static std::string escape(std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    return out;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

// `<｜DSML｜invoke` has been read: the rest of the opening tag, parameters, and the closing tag.
ToolCall read_invoke(CompletionReader& reader) {
  ToolCall call;
  const size_t head_pos = reader.position();
  auto [head, stop] = reader.read_until({kParameterBegin, kInvokeEnd});
  if (stop < 0) reader.fail_at(head_pos, "unterminated " + kInvokeBegin);
  // ` name="NAME">\n`, with any whitespace before "name" and one optional newline after (the
  // encoder writes two before the closing tag when the arguments are empty).
  const size_t name_start = head.find_first_not_of(" \t\n\r\f\v");
  const bool extra_newline = head.ends_with("\">\n\n");
  if (name_start == std::string_view::npos || !head.substr(name_start).starts_with("name=\"") ||
      !(head.ends_with("\">\n") || extra_newline)) {
    reader.fail_at(head_pos, "expected name=\"...\">\\n in " + kInvokeBegin);
  }
  const size_t name_begin = name_start + 6;
  const size_t name_end = head.size() - (extra_newline ? 4 : 3);
  if (name_end < name_begin) reader.fail_at(head_pos, "malformed tool name");
  call.name = std::string(head.substr(name_begin, name_end - name_begin));
  call.arguments = ordered_json::object();

  while (stop == 0) {
    // ` name="KEY" string="true|false">VALUE</｜DSML｜parameter>\n`
    const size_t param_pos = reader.position();
    // Like the reference, find the closing tag without its "<", then require the "<".
    auto [body, found] = reader.read_until({std::string_view(kParameterEnd).substr(1)});
    if (found < 0) reader.fail_at(param_pos, "unterminated " + kParameterBegin);
    if (!body.ends_with('<')) reader.fail_at(param_pos, "malformed " + kParameterEnd + ">");
    body.remove_suffix(1);
    constexpr std::string_view kNameAttr = " name=\"";
    constexpr std::string_view kStringAttr = "\" string=\"";
    const size_t key_end = body.find(kStringAttr);
    if (!body.starts_with(kNameAttr) || key_end == std::string_view::npos) {
      reader.fail_at(param_pos, "expected name=\"...\" string=\"...\" in " + kParameterBegin);
    }
    const std::string key(body.substr(kNameAttr.size(), key_end - kNameAttr.size()));
    std::string_view rest = body.substr(key_end + kStringAttr.size());
    bool is_string;
    if (rest.starts_with("true\">")) {
      is_string = true;
      rest.remove_prefix(6);
    } else if (rest.starts_with("false\">")) {
      is_string = false;
      rest.remove_prefix(7);
    } else {
      reader.fail_at(param_pos, "parameter \"" + key + "\": string must be \"true\" or \"false\"");
    }
    if (call.arguments.contains(key)) {
      reader.fail_at(param_pos,
                     "duplicate parameter \"" + key + "\" in tool call \"" + call.name + "\"");
    }
    if (is_string) {
      call.arguments[key] = std::string(rest);
    } else {
      try {
        call.arguments[key] = ordered_json::parse(rest);
      } catch (const ordered_json::exception& e) {  // parse_error, or out_of_range for 1e400
        reader.fail_at(param_pos, "parameter \"" + key + "\" of tool call \"" + call.name +
                                      "\" has string=\"false\" but its value is not JSON (" +
                                      describe_parse_error(e) + ")");
      }
    }
    reader.expect(">\n");
    if (reader.consume(kParameterBegin)) {
      stop = 0;
    } else {
      reader.expect(kInvokeEnd);
      stop = 1;
    }
  }
  reader.expect(">\n");
  return call;
}

void check_no_special_tokens(std::string_view text, std::string_view field) {
  for (std::string_view token :
       {tok::kBos, tok::kEos, tok::kThinkBegin, tok::kThinkEnd, tok::kDsml}) {
    if (text.find(token) != std::string_view::npos) {
      throw FormatError("completion: " + std::string(field) + " contains the special token \"" +
                        std::string(token) + "\"");
    }
  }
}

}  // namespace

std::string_view chat_role_name(ChatRole role) { return kRoleNames[static_cast<size_t>(role)]; }
std::string_view chat_task_name(ChatTask task) { return kTaskNames[static_cast<size_t>(task)]; }
std::string_view chat_task_token(ChatTask task) { return kTaskTokens[static_cast<size_t>(task)]; }

std::string ToolCall::arguments_text() const { return python_json_dumps(arguments); }

std::vector<ChatMessage> parse_chat_messages(const ordered_json& messages) {
  if (!messages.is_array()) {
    throw FormatError("messages: expected an array, got " + json_type_name(messages));
  }
  std::vector<ChatMessage> parsed;
  parsed.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    parsed.push_back(parse_message(messages[i], "messages[" + std::to_string(i) + "]"));
  }
  return parsed;
}

std::vector<ordered_json> parse_chat_tools(const ordered_json& tools) {
  return parse_tools_at(tools, "tools");
}

void attach_tools(std::vector<ChatMessage>& messages, std::vector<ordered_json> tools) {
  if (tools.empty()) return;
  if (messages.empty() || messages.front().role != ChatRole::kSystem) {
    ChatMessage system;
    system.role = ChatRole::kSystem;
    messages.insert(messages.begin(), std::move(system));
  }
  if (!messages.front().tools.empty()) {
    throw UsageError("tools given both with the request and on its first (system) message");
  }
  messages.front().tools = std::move(tools);
}

std::string encode_chat_prompt(std::span<const ChatMessage> messages,
                               const ChatEncodeOptions& options) {
  check_renderable(messages);
  std::vector<Turn> turns = merge_into_turns(messages);
  sort_tool_results(turns);

  // With tools, every turn keeps its reasoning (interleaved thinking across tool calls).
  const bool any_tools = std::any_of(messages.begin(), messages.end(),
                                     [](const ChatMessage& m) { return !m.tools.empty(); });
  const bool drop_thinking = options.drop_thinking && !any_tools;
  if (options.mode == ThinkingMode::kThinking && drop_thinking) {
    // Developer turns before the last user turn are dropped with the old reasoning.
    const std::ptrdiff_t last_user = last_user_turn(turns);
    std::vector<Turn> kept;
    for (std::ptrdiff_t i = 0; i < std::ssize(turns); ++i) {
      Turn& turn = turns[static_cast<size_t>(i)];
      if (turn.role != ChatRole::kDeveloper || i >= last_user) kept.push_back(std::move(turn));
    }
    turns = std::move(kept);
  }

  std::string prompt = options.add_bos ? std::string(tok::kBos) : std::string();
  PromptRenderer(std::move(turns), options, drop_thinking).render(prompt);
  return prompt;
}

ChatMessage parse_completion(std::string_view completion, ThinkingMode mode) {
  const std::string tool_calls_start = "\n\n" + kToolCallsBegin;
  CompletionReader reader(completion);
  ChatMessage message;
  message.role = ChatRole::kAssistant;

  if (mode == ThinkingMode::kThinking) {
    auto [reasoning, stop] = reader.read_until({tok::kThinkEnd, tool_calls_start});
    if (stop != 0) {
      throw FormatError("completion: the reasoning is not closed by " +
                        std::string(tok::kThinkEnd));
    }
    message.reasoning_content = std::string(reasoning);
  }

  auto [content, stop] = reader.read_until({tok::kEos, tool_calls_start});
  if (stop < 0) {
    throw FormatError("completion: no " + std::string(tok::kEos) + " after the content");
  }
  message.content = std::string(content);

  if (stop == 1) {
    reader.expect(">\n");
    while (!reader.consume(kToolCallsEnd)) {
      if (!reader.consume(kInvokeBegin)) {
        reader.fail("expected " + kInvokeBegin + " or " + kToolCallsEnd);
      }
      message.tool_calls.push_back(read_invoke(reader));
    }
    // As in the reference, the end-of-sentence may be missing after a tool-call block.
    if (!reader.at_end()) reader.expect(tok::kEos);
  }
  if (!reader.at_end()) reader.fail("expected the end of the completion");

  check_no_special_tokens(*message.content, "content");
  if (message.reasoning_content) check_no_special_tokens(*message.reasoning_content, "reasoning");
  return message;
}

ordered_json chat_message_to_json(const ChatMessage& message) {
  ordered_json json = ordered_json::object();
  json["role"] = chat_role_name(message.role);
  if (message.content) json["content"] = *message.content;
  if (message.reasoning_content) json["reasoning_content"] = *message.reasoning_content;
  if (!message.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (const ToolCall& call : message.tool_calls) {
      ordered_json entry = ordered_json::object();
      if (!call.id.empty()) entry["id"] = call.id;
      entry["type"] = "function";
      entry["function"] = {{"name", call.name}, {"arguments", call.arguments_text()}};
      calls.push_back(std::move(entry));
    }
    json["tool_calls"] = std::move(calls);
  }
  if (message.tool_call_id) json["tool_call_id"] = *message.tool_call_id;
  if (!message.tools.empty()) {
    ordered_json tools = ordered_json::array();
    for (const ordered_json& function : message.tools) {
      tools.push_back({{"type", "function"}, {"function", function}});
    }
    json["tools"] = std::move(tools);
  }
  if (message.response_format) json["response_format"] = *message.response_format;
  if (message.task) json["task"] = chat_task_name(*message.task);
  if (message.without_eos) json["wo_eos"] = true;
  return json;
}

ChatSpecialTokens resolve_chat_special_tokens(const TokenIdLookup& lookup) {
  const auto id_of = [&](std::string_view token) {
    const std::optional<int32_t> id = lookup(token);
    if (!id) {
      throw FormatError("tokenizer: no token \"" + std::string(token) +
                        "\", which the DeepSeek-V4 chat encoding needs");
    }
    return *id;
  };
  ChatSpecialTokens ids;
  ids.bos = id_of(tok::kBos);
  ids.eos = id_of(tok::kEos);
  ids.user = id_of(tok::kUser);
  ids.assistant = id_of(tok::kAssistant);
  ids.latest_reminder = id_of(tok::kLatestReminder);
  ids.think_begin = id_of(tok::kThinkBegin);
  ids.think_end = id_of(tok::kThinkEnd);
  ids.dsml = id_of(tok::kDsml);
  for (size_t i = 0; i < kNumChatTasks; ++i) ids.tasks[i] = id_of(kTaskTokens[i]);
  return ids;
}

}  // namespace dsv4
