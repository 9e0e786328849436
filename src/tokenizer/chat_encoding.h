// DeepSeek-V4 chat prompt encoding (MODEL.md §10.2): OpenAI-style messages and tools become the
// exact prompt text DeepSeek's Python encoder (the model repository's encoding/ folder) writes,
// and a completion (the text the model generated after the prompt) is parsed back into
// reasoning, content and DSML tool calls. Works on text; token ids come from the tokenizer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsv4 {

// The special strings the encoder writes. Each is one added token of DeepSeek-V4's tokenizer.
namespace chat_token {
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkBegin = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
}  // namespace chat_token

enum class ChatRole { kSystem, kUser, kAssistant, kTool, kDeveloper, kLatestReminder };
std::string_view chat_role_name(ChatRole role);  // "system", "user", ..., "latest_reminder"

// Thinking: the assistant turn opens with <think> and the model reasons before answering.
// Chat: the assistant turn opens with </think> and the model answers at once.
enum class ThinkingMode { kChat, kThinking };

// "high" (the reference's default, same as none) adds nothing; "max" prefixes the prompt with
// the reference's "Reasoning Effort: Absolute maximum..." paragraph (thinking mode only).
enum class ReasoningEffort { kHigh, kMax };

// Quick-instruction tasks: a user or developer message carrying one is followed by the task's
// token (action: "<｜Assistant｜>", the mode's think token, then "<｜action｜>").
enum class ChatTask { kAction, kQuery, kAuthority, kDomain, kTitle, kReadUrl };
inline constexpr size_t kNumChatTasks = 6;
std::string_view chat_task_name(ChatTask task);   // "action", "query", ...
std::string_view chat_task_token(ChatTask task);  // "<｜action｜>", "<｜query｜>", ...

struct ToolCall {
  std::string id;  // OpenAI call id; may be empty (orders tool results only)
  std::string name;
  nlohmann::ordered_json arguments;  // a JSON object, keys in the order they were given
  // The arguments as OpenAI's function.arguments string (Python json.dumps formatting).
  std::string arguments_text() const;
  bool operator==(const ToolCall&) const = default;
};

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::optional<std::string> content;            // null/absent renders as ""
  std::optional<std::string> reasoning_content;  // assistant only
  std::vector<ToolCall> tool_calls;              // assistant only
  std::optional<std::string> tool_call_id;       // tool only: the call this result answers
  std::vector<nlohmann::ordered_json> tools;     // system/developer: the "function" objects
  std::optional<nlohmann::ordered_json> response_format;  // system/developer
  std::optional<ChatTask> task;                           // user/developer/system
  bool without_eos = false;  // assistant: leave the turn open (no end-of-sentence), to prefill
  bool operator==(const ChatMessage&) const = default;
};

// Parses an OpenAI-style "messages" array. Fields other than the ones above (name, mask, ...)
// are ignored; "wo_eos" sets without_eos. A tool message's content may also be an array of
// parts: text parts are joined with blank lines, others become "[Unsupported <type>]".
// Throws FormatError naming the message index and field ("messages[3].tool_calls[0]...").
std::vector<ChatMessage> parse_chat_messages(const nlohmann::ordered_json& messages);

// Parses an OpenAI-style "tools" array into the "function" objects the prompt lists.
// Throws FormatError naming the tool index and field.
std::vector<nlohmann::ordered_json> parse_chat_tools(const nlohmann::ordered_json& tools);

// Puts request-level tools where the encoder reads them: on the first message when it is a
// system message (as DeepSeek's test vectors do), else on a new empty system message in front
// (as vLLM does). No-op for an empty list. Throws UsageError if that system message already
// carries tools.
void attach_tools(std::vector<ChatMessage>& messages, std::vector<nlohmann::ordered_json> tools);

struct ChatEncodeOptions {
  ThinkingMode mode = ThinkingMode::kThinking;
  // Drop the reasoning of assistant turns before the last user turn, and developer messages
  // there. Ignored (nothing is dropped) when any message carries tools.
  bool drop_thinking = true;
  ReasoningEffort reasoning_effort = ReasoningEffort::kHigh;
  bool add_bos = true;
};

// The prompt text. Tool messages are merged into user turns as <tool_result> blocks (ordered
// as the preceding assistant's calls), and the text ends with "<｜Assistant｜><think>" (or
// "</think>" in chat mode) when the conversation ends with a user or developer turn.
// Throws FormatError naming the message index for content the encoder cannot render.
std::string encode_chat_prompt(std::span<const ChatMessage> messages,
                               const ChatEncodeOptions& options = {});

// Parses one generated assistant turn: the text after the prompt, up to and including the
// end-of-sentence token. In thinking mode it starts with the reasoning, closed by </think>;
// then the content, then optionally a DSML tool_calls block (whose end-of-sentence may be
// missing, as in the reference). Throws FormatError saying what was expected at which byte
// offset for anything else: missing </think> or end-of-sentence, text after it, special
// tokens inside reasoning or content, malformed DSML, a string="false" parameter that is not
// JSON, a duplicate parameter. Stricter than the reference parser in two cases it lets
// through: a tool-call block cut off before its end, and a newline between a parameter
// value's "<" and "/｜DSML｜parameter>".
ChatMessage parse_completion(std::string_view completion, ThinkingMode mode);

// The message as an OpenAI-style JSON object (tool calls with type "function" and the
// arguments as a string; tools wrapped back as {"type": "function", "function": ...}).
// parse_chat_messages(array of these) gives the messages back.
nlohmann::ordered_json chat_message_to_json(const ChatMessage& message);

// The ids of the special tokens above, looked up once in the tokenizer's vocabulary.
struct ChatSpecialTokens {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t user = -1;
  int32_t assistant = -1;
  int32_t latest_reminder = -1;
  int32_t think_begin = -1;
  int32_t think_end = -1;
  int32_t dsml = -1;
  std::array<int32_t, kNumChatTasks> tasks{};  // indexed by ChatTask
};

// Maps a token's text to its id, or nullopt when the vocabulary has no such token (e.g. a
// lambda around Tokenizer::token_id).
using TokenIdLookup = std::function<std::optional<int32_t>(std::string_view)>;

// Throws FormatError naming the first special token the lookup does not know.
ChatSpecialTokens resolve_chat_special_tokens(const TokenIdLookup& lookup);

}  // namespace dsv4
