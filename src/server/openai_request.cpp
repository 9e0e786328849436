// Parsing and checking of the OpenAI request bodies; see openai_request.h.
#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "server/api_error.h"

namespace dsv4::server {
namespace {

using nlohmann::ordered_json;

std::string describe_json_error(const ordered_json::exception& error) {
  const std::string what = error.what();
  return what.substr(0, what.find("; last read"));
}

// "a string", "an object", ... as OpenAI's messages say it.
std::string article_type(const ordered_json& value) {
  if (value.is_number()) return "a number";
  if (value.is_boolean()) return "a boolean";
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_string()) return "a string";
  return "null";
}

// The 400 for a value at `path` (a field, or an element such as "stop[2]") of the wrong type.
[[noreturn]] void wrong_type(const std::string& path, const std::string& expected, const ordered_json& value) {
  throw invalid_request("Invalid type for '" + path + "': expected " + expected + ", but got " + article_type(value) +
                            " instead.",
                        path, "invalid_type");
}

// Reads the typed fields of one JSON object; every error names the field with its path.
class Fields {
 public:
  Fields(const ordered_json& object, std::string prefix)
      : object_(object), prefix_(std::move(prefix)) {}

  // The value, or nullptr when absent or null (OpenAI treats null as absent).
  const ordered_json* find(const char* key) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string path(const char* key) const { return prefix_ + key; }

  [[noreturn]] void type_error(const char* key, const char* expected,
                               const ordered_json& value) const {
    wrong_type(path(key), expected, value);
  }

  [[noreturn]] void missing(const char* key) const {
    throw invalid_request("Missing required parameter: '" + path(key) + "'.", path(key),
                          "missing_required_parameter");
  }

  [[noreturn]] void value_error(const char* key, const std::string& what) const {
    throw invalid_request("Invalid value for '" + path(key) + "': " + what, path(key),
                          "invalid_value");
  }

  std::optional<bool> boolean(const char* key) const {
    const ordered_json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) type_error(key, "a boolean", *value);
    return value->get<bool>();
  }

  std::optional<std::string> string(const char* key) const {
    const ordered_json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_string()) type_error(key, "a string", *value);
    return value->get<std::string>();
  }

  // A number within [low, high]; `low_open` excludes the lower bound.
  std::optional<float> number(const char* key, double low, double high,
                              bool low_open = false) const {
    const ordered_json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_number()) type_error(key, "a number", *value);
    const double number = value->get<double>();
    if (!(low_open ? number > low : number >= low) || !(number <= high)) {
      value_error(key, format_number(number) + " is outside " + (low_open ? "(" : "[") +
                           format_number(low) + ", " + format_number(high) + "].");
    }
    return static_cast<float>(number);
  }

  // An integer (an integral float such as 16.0 counts) within [low, high]; a refusal names the
  // bound it passes (not both: the upper one is often the type's largest value).
  std::optional<int64_t> integer(const char* key, int64_t low, int64_t high) const {
    const ordered_json* value = find(key);
    if (!value) return std::nullopt;
    const int64_t number = integer_value(*value, key);
    const std::string text = std::to_string(number);
    if (number < low) value_error(key, text + " is below the minimum of " + std::to_string(low) + ".");
    if (number > high) value_error(key, text + " is above the maximum of " + std::to_string(high) + ".");
    return number;
  }

  // Any 64-bit integer, signed or unsigned, as its bits.
  std::optional<uint64_t> bits64(const char* key) const {
    const ordered_json* value = find(key);
    if (!value) return std::nullopt;
    if (value->is_number_unsigned()) return value->get<uint64_t>();
    return static_cast<uint64_t>(integer_value(*value, key));
  }

  int64_t integer_value(const ordered_json& value, const char* key) const {
    if (value.is_number_unsigned()) {
      const uint64_t number = value.get<uint64_t>();
      if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        value_error(key, std::to_string(number) + " is too large.");
      }
      return static_cast<int64_t>(number);
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_number_float()) {
      const double number = value.get<double>();
      if (std::floor(number) == number && std::fabs(number) < 9e15) {
        return static_cast<int64_t>(number);
      }
    }
    type_error(key, "an integer", value);
  }

  static std::string format_number(double number) {
    ordered_json as_json = number;
    if (std::floor(number) == number && std::fabs(number) < 9e15) {
      as_json = static_cast<int64_t>(number);
    }
    return as_json.dump();
  }

 private:
  const ordered_json& object_;
  std::string prefix_;
};

// ids within int32 (the tokenizer and the engine check them against the vocabulary).
std::vector<int32_t> token_id_list(const ordered_json& list, const std::string& where) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const ordered_json& id = list[i];
    if (!id.is_number_integer()) wrong_type(at, "an integer token id", id);
    const bool in_range = id.is_number_unsigned()
                              ? id.get<uint64_t>() <= std::numeric_limits<int32_t>::max()
                              : id.get<int64_t>() >= 0 &&
                                    id.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!in_range) {
      throw invalid_request("Invalid value for '" + at + "': " + id.dump() +
                                " is not a token id.",
                            at, "invalid_value");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

std::optional<std::string> model_field(const Fields& fields) { return fields.string("model"); }


std::vector<std::string> stop_strings(const Fields& fields) {
  const ordered_json* stop = fields.find("stop");
  if (!stop) return {};
  std::vector<std::string> strings;
  if (stop->is_string()) {
    strings.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    for (size_t i = 0; i < stop->size(); ++i) {
      if (!(*stop)[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", "a string", (*stop)[i]);
      strings.push_back((*stop)[i].get<std::string>());
    }
  } else {
    fields.type_error("stop", "a string or an array of strings", *stop);
  }
  if (strings.size() > kMaxStopStrings) {
    fields.value_error("stop", "at most " + std::to_string(kMaxStopStrings) +
                                   " stop strings are accepted, got " +
                                   std::to_string(strings.size()) + ".");
  }
  for (const std::string& s : strings) {
    if (s.empty()) fields.value_error("stop", "stop strings must not be empty.");
  }
  return strings;
}

// OpenAI's logit_bias: an object from token ids (as strings, JSON keys) to biases in [-100, 100].
std::vector<std::pair<int32_t, float>> logit_bias(const Fields& fields) {
  std::vector<std::pair<int32_t, float>> biases;
  const ordered_json* map = fields.find("logit_bias");
  if (!map) return biases;
  if (!map->is_object()) fields.type_error("logit_bias", "an object of token ids to numbers", *map);
  for (const auto& [key, value] : map->items()) {
    const std::string at = "logit_bias." + key;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      throw invalid_request("Invalid key in 'logit_bias': \"" + key + "\" is not a token id.", "logit_bias",
                            "invalid_value");
    }
    if (!value.is_number()) wrong_type(at, "a number", value);
    const double bias = value.get<double>();
    if (!(bias >= -100 && bias <= 100)) {
      throw invalid_request("Invalid value for '" + at + "': " + Fields::format_number(bias) +
                                " is outside [-100, 100].",
                            at, "invalid_value");
    }
    biases.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  std::sort(biases.begin(), biases.end());
  return biases;
}

// The fields both endpoints share (logprobs differ and are read by each endpoint).
// vLLM's guided_choice or structured_outputs.choice: a non-empty array of non-empty strings.
std::shared_ptr<const std::vector<std::string>> guided_choices(const Fields& fields) {
  const auto list_at = [](const Fields& f, const char* key) -> std::shared_ptr<const std::vector<std::string>> {
    const ordered_json* value = f.find(key);
    if (!value) return nullptr;
    if (!value->is_array()) f.type_error(key, "an array of strings", *value);
    if (value->empty()) f.value_error(key, "at least one choice is needed.");
    if (value->size() > kMaxGuidedChoices)
      f.value_error(key, "at most " + std::to_string(kMaxGuidedChoices) + " choices, got " +
                             std::to_string(value->size()) + ".");
    auto choices = std::make_shared<std::vector<std::string>>();
    for (const ordered_json& choice : *value) {
      if (!choice.is_string()) f.type_error(key, "an array of strings", *value);
      if (choice.get_ref<const std::string&>().empty()) f.value_error(key, "a choice is an empty string.");
      choices->push_back(choice.get<std::string>());
    }
    return choices;
  };
  std::shared_ptr<const std::vector<std::string>> choices = list_at(fields, "guided_choice");
  if (const ordered_json* outputs = fields.find("structured_outputs"); outputs && outputs->is_object()) {
    if (auto listed = list_at(Fields(*outputs, "structured_outputs."), "choice")) {
      if (choices) fields.value_error("structured_outputs", "give guided_choice or structured_outputs.choice, not both.");
      choices = std::move(listed);
    }
  }
  return choices;
}

// vLLM's guided_regex or structured_outputs.regex: a pattern (sampling/regex_nfa.h), compiled; one
// the compiler refuses is a 400 on the field that gave it, naming the construct.
std::shared_ptr<const RegexNfa> guided_regex(const Fields& fields) {
  const auto compile_at = [](const Fields& f, const char* key) -> std::shared_ptr<const RegexNfa> {
    const std::optional<std::string> pattern = f.string(key);
    if (!pattern) return nullptr;
    try {
      return std::make_shared<const RegexNfa>(RegexNfa::compile(*pattern));
    } catch (const UsageError& e) {
      f.value_error(key, e.what());
    }
  };
  std::shared_ptr<const RegexNfa> regex = compile_at(fields, "guided_regex");
  if (const ordered_json* outputs = fields.find("structured_outputs"); outputs && outputs->is_object()) {
    if (auto given = compile_at(Fields(*outputs, "structured_outputs."), "regex")) {
      if (regex) fields.value_error("structured_outputs", "give guided_regex or structured_outputs.regex, not both.");
      regex = std::move(given);
    }
  }
  return regex;
}

// vLLM's bad_words: an array of non-empty strings, at most kMaxBadWords of them.
std::vector<std::string> bad_words(const Fields& fields) {
  const ordered_json* words = fields.find("bad_words");
  if (!words) return {};
  if (!words->is_array()) fields.type_error("bad_words", "an array of strings", *words);
  if (words->size() > kMaxBadWords) {
    fields.value_error("bad_words", "at most " + std::to_string(kMaxBadWords) + " bad words are accepted, got " +
                                        std::to_string(words->size()) + ".");
  }
  std::vector<std::string> strings;
  for (size_t i = 0; i < words->size(); ++i) {
    const std::string at = "bad_words[" + std::to_string(i) + "]";
    const ordered_json& word = (*words)[i];
    if (!word.is_string()) wrong_type(at, "a string", word);
    if (word.get_ref<const std::string&>().empty())
      throw invalid_request("Invalid value for '" + at + "': a bad word must not be empty.", at, "invalid_value");
    strings.push_back(word.get<std::string>());
  }
  return strings;
}

GenerationOptions generation_options(const Fields& fields, const SamplingDefaults& defaults) {
  GenerationOptions o;
  o.choices = guided_choices(fields);
  o.regex = guided_regex(fields);
  if (o.choices && o.regex) fields.value_error("guided_regex", "give guided_choice or guided_regex, not both.");
  o.temperature = fields.number("temperature", 0, 2).value_or(defaults.temperature);
  o.top_p = fields.number("top_p", 0, 1, /*low_open=*/true).value_or(defaults.top_p);
  const int64_t top_k = fields.integer("top_k", -1, std::numeric_limits<int32_t>::max()).value_or(defaults.top_k);
  o.top_k = static_cast<int32_t>(top_k < 0 ? 0 : top_k);
  o.min_p = fields.number("min_p", 0, 1).value_or(defaults.min_p);
  o.seed = fields.bits64("seed");
  o.presence_penalty = fields.number("presence_penalty", -2, 2).value_or(o.presence_penalty);
  o.frequency_penalty = fields.number("frequency_penalty", -2, 2).value_or(o.frequency_penalty);
  o.repetition_penalty =
      fields.number("repetition_penalty", 0, 2, /*low_open=*/true).value_or(defaults.repetition_penalty);
  o.logit_bias = logit_bias(fields);
  if (const ordered_json* ids = fields.find("allowed_token_ids")) {
    if (!ids->is_array()) fields.type_error("allowed_token_ids", "an array of token ids", *ids);
    if (ids->empty()) fields.value_error("allowed_token_ids", "at least one token id is needed.");
    o.allowed_token_ids = token_id_list(*ids, "allowed_token_ids");
  }
  o.bad_words = bad_words(fields);
  o.truncate_prompt_tokens = fields.integer("truncate_prompt_tokens", -1, std::numeric_limits<int64_t>::max());
  if (o.truncate_prompt_tokens == 0)
    fields.value_error("truncate_prompt_tokens", "0 keeps no prompt token; give k >= 1 (the last k tokens) or -1 "
                                                 "(the model's maximum length).");
  o.stop = stop_strings(fields);
  if (const ordered_json* ids = fields.find("stop_token_ids")) {
    if (!ids->is_array()) fields.type_error("stop_token_ids", "an array of token ids", *ids);
    o.stop_token_ids = token_id_list(*ids, "stop_token_ids");
  }
  o.ignore_eos = fields.boolean("ignore_eos").value_or(false);
  o.min_tokens = fields.integer("min_tokens", 0, std::numeric_limits<int64_t>::max()).value_or(0);
  o.include_stop_str_in_output = fields.boolean("include_stop_str_in_output").value_or(false);
  o.stream = fields.boolean("stream").value_or(false);
  if (const ordered_json* options = fields.find("stream_options")) {
    if (!options->is_object()) fields.type_error("stream_options", "an object", *options);
    if (!o.stream) {
      throw invalid_request("stream_options can only be given when stream is true.",
                            "stream_options", "invalid_value");
    }
    o.include_usage =
        Fields(*options, "stream_options.").boolean("include_usage").value_or(false);
  }
  o.n = static_cast<int32_t>(fields.integer("n", 1, kMaxChoices).value_or(1));
  if (const auto count = fields.integer("prompt_logprobs", 0, kMaxTopLogprobs)) {
    if (o.stream) fields.value_error("prompt_logprobs", "prompt_logprobs are not available when stream is true.");
    o.prompt_logprobs = static_cast<int32_t>(*count);
  }
  return o;
}

// OpenAI's content may be an array of parts; the encoding takes text, so text parts are joined
// (with newlines, as vLLM does) and other parts are refused. Tool messages keep their parts:
// the encoding renders those itself.
ordered_json text_content_messages(const ordered_json& messages) {
  ordered_json normalised = messages;
  for (size_t i = 0; i < normalised.size(); ++i) {
    ordered_json& message = normalised[i];
    if (!message.is_object()) continue;  // parse_chat_messages names it
    const std::string where = "messages[" + std::to_string(i) + "]";
    const auto role = message.find("role");
    const bool is_tool = role != message.end() && role->is_string() && *role == "tool";
    const auto content = message.find("content");
    if (!is_tool && content != message.end() && content->is_array()) {
      std::string text;
      for (size_t p = 0; p < content->size(); ++p) {
        const std::string at = where + ".content[" + std::to_string(p) + "]";
        const ordered_json& part = (*content)[p];
        if (!part.is_object() || Fields(part, at + ".").string("type").value_or("") != "text") {
          throw invalid_request("Only text content parts are supported.", at, "invalid_value");
        }
        if (p > 0) text += "\n";
        text += Fields(part, at + ".").string("text").value_or("");
      }
      *content = text;
    }
    // vLLM's newer name for an assistant's reasoning, accepted on input as well.
    const auto reasoning = message.find("reasoning");
    if (reasoning != message.end() && !message.contains("reasoning_content")) {
      message["reasoning_content"] = *reasoning;
    }
  }
  return normalised;
}

// The library's FormatError says "messages[3].content: missing"; the part before ": " is the
// field, which becomes OpenAI's param.
[[noreturn]] void rethrow_as_invalid_request(const Error& error) {
  const std::string what = error.what();
  const size_t colon = what.find(": ");
  std::optional<std::string> param;
  if (colon != std::string::npos && what.find(' ') > colon) param = what.substr(0, colon);
  throw invalid_request(what, param);
}

ToolChoice parse_tool_choice(const Fields& fields, const std::vector<ordered_json>& tools,
                             std::string& name) {
  const ordered_json* choice = fields.find("tool_choice");
  if (!choice) return tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  ToolChoice parsed;
  if (choice->is_string()) {
    const std::string word = choice->get<std::string>();
    if (word == "none") {
      parsed = ToolChoice::kNone;
    } else if (word == "auto") {
      parsed = ToolChoice::kAuto;
    } else if (word == "required") {
      parsed = ToolChoice::kRequired;
    } else {
      fields.value_error("tool_choice", "expected none, auto, required or a function object, "
                                        "got \"" + word + "\".");
    }
  } else if (choice->is_object()) {
    const Fields choice_fields(*choice, "tool_choice.");
    if (choice_fields.string("type").value_or("") != "function") {
      choice_fields.value_error("type", "expected \"function\".");
    }
    const ordered_json* function = choice_fields.find("function");
    if (!function || !function->is_object()) choice_fields.missing("function");
    const Fields function_fields(*function, "tool_choice.function.");
    const std::optional<std::string> function_name = function_fields.string("name");
    if (!function_name) function_fields.missing("name");
    name = *function_name;
    parsed = ToolChoice::kNamed;
  } else {
    fields.type_error("tool_choice", "a string or an object", *choice);
  }
  if (parsed != ToolChoice::kNone && parsed != ToolChoice::kAuto && tools.empty()) {
    fields.value_error("tool_choice", "a required or named tool choice needs tools.");
  }
  if (parsed == ToolChoice::kNamed) {
    bool known = false;
    for (const ordered_json& tool : tools) known = known || tool["name"] == name;
    if (!known) fields.value_error("tool_choice", "no tool is named \"" + name + "\".");
  }
  return parsed;
}

std::optional<ordered_json> parse_response_format(const Fields& fields) {
  const ordered_json* format = fields.find("response_format");
  if (!format) return std::nullopt;
  if (!format->is_object()) fields.type_error("response_format", "an object", *format);
  const Fields format_fields(*format, "response_format.");
  const std::optional<std::string> type = format_fields.string("type");
  if (!type) format_fields.missing("type");
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") return *format;
  if (*type == "json_schema") {
    const ordered_json* schema = format_fields.find("json_schema");
    if (!schema || !schema->is_object()) format_fields.missing("json_schema");
    return *format;
  }
  format_fields.value_error("type", "expected text, json_object or json_schema, got \"" + *type +
                                        "\".");
}

// vLLM's structured-output extras: "guided_json" (older) or "structured_outputs": {"json": ...}
// (newer), a schema as an object or as a string of JSON, with the parameter it came in.
struct GuidedSchema {
  ordered_json schema;
  std::string param;
};
std::optional<GuidedSchema> guided_json_schema(const Fields& fields) {
  const auto schema_at = [](const Fields& f, const char* key) -> std::optional<ordered_json> {
    const ordered_json* value = f.find(key);
    if (!value) return std::nullopt;
    if (value->is_object()) return *value;
    if (!value->is_string()) f.type_error(key, "a JSON schema (an object or a string of JSON)", *value);
    try {
      ordered_json parsed = ordered_json::parse(value->get<std::string>());
      if (parsed.is_object()) return parsed;
    } catch (const ordered_json::parse_error&) {
    }
    f.value_error(key, "the string is not a JSON object.");
  };
  std::optional<GuidedSchema> guided;
  if (std::optional<ordered_json> json = schema_at(fields, "guided_json")) guided = {std::move(*json), "guided_json"};
  if (const ordered_json* outputs = fields.find("structured_outputs")) {
    if (!outputs->is_object()) fields.type_error("structured_outputs", "an object", *outputs);
    const Fields output_fields(*outputs, "structured_outputs.");
    if (std::optional<ordered_json> json = schema_at(output_fields, "json")) {
      if (guided) fields.value_error("structured_outputs", "give guided_json or structured_outputs.json, not both.");
      guided = {std::move(*json), "structured_outputs.json"};
    }
  }
  return guided;
}

// A schema compiled for the constraint; one the compiler refuses is a 400 on `param`.
std::shared_ptr<const JsonSchema> compile_schema(const ordered_json& schema, const std::string& param) {
  try {
    return JsonSchema::compile(schema);
  } catch (const JsonSchemaError& e) {
    throw invalid_request("Invalid value for '" + param + "': " + e.what(), param, "invalid_value");
  }
}

// response_format json_schema's schema, compiled (none for json_object or a json_schema without
// one).
std::shared_ptr<const JsonSchema> compile_response_schema(const ordered_json& format) {
  const auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object()) return nullptr;
  const auto schema = spec->find("schema");
  if (schema == spec->end() || schema->is_null()) return nullptr;
  return compile_schema(*schema, "response_format.json_schema.schema");
}

ReasoningEffort parse_reasoning_effort(const Fields& fields, const char* key) {
  const std::optional<std::string> effort = fields.string(key);
  if (!effort || *effort == "high" || *effort == "medium" || *effort == "low") {
    return ReasoningEffort::kHigh;
  }
  if (*effort == "max") return ReasoningEffort::kMax;
  fields.value_error(key, "expected low, medium, high or max, got \"" + *effort + "\".");
}

// The parts of a chat request /tokenize shares: messages, tools, tool choice, response format,
// chat_template_kwargs.
ChatCompletionRequest chat_conversation(const Fields& fields) {
  ChatCompletionRequest request;
  request.model = model_field(fields);
  const ordered_json* messages = fields.find("messages");
  if (!messages) fields.missing("messages");
  if (!messages->is_array()) fields.type_error("messages", "an array", *messages);
  if (messages->empty()) fields.value_error("messages", "at least one message is needed.");
  try {
    request.messages = parse_chat_messages(text_content_messages(*messages));
    if (const ordered_json* tools = fields.find("tools")) {
      request.tools = parse_chat_tools(*tools);
    }
  } catch (const FormatError& e) {
    rethrow_as_invalid_request(e);
  }
  request.tool_choice = parse_tool_choice(fields, request.tools, request.tool_choice_name);
  request.response_format = parse_response_format(fields);
  if (std::optional<GuidedSchema> guided = guided_json_schema(fields)) {
    if (request.response_format)
      fields.value_error("guided_json", "give response_format or guided_json / structured_outputs.json, not both.");
    request.json_schema = compile_schema(guided->schema, guided->param);
    // Taken as a json_schema response_format: constrained, and shown to the model the same way.
    request.response_format = ordered_json{
        {"type", "json_schema"}, {"json_schema", {{"name", "guided_json"}, {"schema", std::move(guided->schema)}}}};
  } else if (request.response_format) {
    request.json_schema = compile_response_schema(*request.response_format);
  }
  if (request.response_format &&
      (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kNamed)) {
    fields.value_error("response_format", "a JSON response_format cannot be combined with a "
                                          "required or named tool_choice (that answer is a tool "
                                          "call, not a JSON object).");
  }
  request.reasoning_effort = parse_reasoning_effort(fields, "reasoning_effort");
  if (const ordered_json* kwargs = fields.find("chat_template_kwargs")) {
    if (!kwargs->is_object()) fields.type_error("chat_template_kwargs", "an object", *kwargs);
    const Fields kwarg_fields(*kwargs, "chat_template_kwargs.");
    // "thinking" is DeepSeek's word; "enable_thinking" the one other models' templates use.
    const std::optional<bool> thinking = kwarg_fields.boolean("thinking");
    const std::optional<bool> enable_thinking = kwarg_fields.boolean("enable_thinking");
    if (thinking.value_or(enable_thinking.value_or(false))) {
      request.thinking = ThinkingMode::kThinking;
    }
    if (kwarg_fields.find("reasoning_effort")) {
      request.reasoning_effort = parse_reasoning_effort(kwarg_fields, "reasoning_effort");
    }
  }
  return request;
}

}  // namespace

ordered_json parse_request_body(std::string_view body) {
  // Nesting is measured before parsing, outside strings, so a deep body costs one pass.
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw invalid_request("The request body nests deeper than " +
                                  std::to_string(kMaxJsonDepth) + " levels.",
                              std::nullopt, "invalid_json");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  ordered_json parsed;
  try {
    parsed = ordered_json::parse(body);
  } catch (const ordered_json::exception& e) {
    throw invalid_request("The request body is not valid JSON: " + describe_json_error(e),
                          std::nullopt, "invalid_json");
  }
  if (!parsed.is_object()) {
    throw invalid_request("The request body must be a JSON object, got " +
                              article_type(parsed) + ".",
                          std::nullopt, "invalid_json");
  }
  return parsed;
}

ChatCompletionRequest parse_chat_completion_request(const ordered_json& body, const SamplingDefaults& defaults) {
  const Fields fields(body, "");
  ChatCompletionRequest request = chat_conversation(fields);
  GenerationOptions& o = request.generation;
  o = generation_options(fields, defaults);
  if (o.choices && request.response_format)
    fields.value_error("guided_choice", "give response_format (or guided_json) or guided_choice, not both.");
  if (o.choices && (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kNamed))
    fields.value_error("guided_choice", "a guided_choice cannot be combined with a required or named tool_choice "
                                        "(that answer is a tool call).");
  if (o.regex && request.response_format)
    fields.value_error("guided_regex", "give response_format (or guided_json) or guided_regex, not both.");
  if (o.regex && (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kNamed))
    fields.value_error("guided_regex", "a guided_regex cannot be combined with a required or named tool_choice "
                                       "(that answer is a tool call).");
  // max_completion_tokens is OpenAI's newer name; it wins when both are given.
  o.max_tokens = fields.integer("max_tokens", 1, std::numeric_limits<int64_t>::max());
  if (const auto newer =
          fields.integer("max_completion_tokens", 1, std::numeric_limits<int64_t>::max())) {
    o.max_tokens = newer;
  }
  if (!o.max_tokens) o.max_tokens = defaults.max_tokens;
  o.logprobs = fields.boolean("logprobs").value_or(false);
  o.top_logprobs =
      static_cast<int32_t>(fields.integer("top_logprobs", 0, kMaxTopLogprobs).value_or(0));
  if (o.top_logprobs > 0 && !o.logprobs) {
    fields.value_error("top_logprobs", "top_logprobs needs logprobs to be true.");
  }
  return request;
}

CompletionRequest parse_completion_request(const ordered_json& body, const SamplingDefaults& defaults) {
  const Fields fields(body, "");
  CompletionRequest request;
  request.model = model_field(fields);
  const ordered_json* prompt = fields.find("prompt");
  if (!prompt) fields.missing("prompt");
  // A string, ids, or a list of either.
  std::vector<const ordered_json*> singles = {prompt};
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number()) {
    singles.clear();
    for (const ordered_json& p : *prompt) singles.push_back(&p);
  }
  for (size_t i = 0; i < singles.size(); ++i) {
    const ordered_json& single = *singles[i];
    const std::string at = singles.size() > 1 || single != *prompt ? "prompt[" + std::to_string(i) + "]" : "prompt";
    CompletionPrompt p;
    if (single.is_string()) {
      p.text = single.get<std::string>();
    } else if (single.is_array()) {
      p.ids = token_id_list(single, at);
    } else {
      wrong_type(at, "a string or an array of token ids", single);
    }
    if (p.text ? p.text->empty() : p.ids.empty()) {
      throw invalid_request("Invalid value for '" + at + "': the prompt is empty.", at, "invalid_value");
    }
    request.prompts.push_back(std::move(p));
  }
  request.echo = fields.boolean("echo").value_or(false);
  if (fields.find("suffix")) fields.value_error("suffix", "suffix is not supported.");
  if (fields.integer("best_of", 1, std::numeric_limits<int32_t>::max()).value_or(1) > 1) {
    fields.value_error("best_of", "best_of > 1 is not supported.");
  }
  GenerationOptions& o = request.generation;
  o = generation_options(fields, defaults);
  if (static_cast<int64_t>(request.prompts.size()) * o.n > kMaxChoices) {
    fields.value_error("prompt", std::to_string(request.prompts.size()) + " prompts of " + std::to_string(o.n) +
                                     " choices each are more than the " + std::to_string(kMaxChoices) +
                                     " choices a request may have.");
  }
  o.max_tokens = fields.integer("max_tokens", 1, std::numeric_limits<int64_t>::max())
                     .value_or(defaults.max_tokens.value_or(kDefaultCompletionMaxTokens));
  // Completions give logprobs as a count of alternatives: 0 means the sampled token's only.
  if (const auto count = fields.integer("logprobs", 0, kMaxCompletionLogprobs)) {
    o.logprobs = true;
    o.top_logprobs = static_cast<int32_t>(*count);
  }
  if (const std::optional<GuidedSchema> guided = guided_json_schema(fields))
    request.json_schema = compile_schema(guided->schema, guided->param);
  if (o.choices && request.json_schema)
    fields.value_error("guided_choice", "give guided_json or guided_choice, not both.");
  if (o.regex && request.json_schema) fields.value_error("guided_regex", "give guided_json or guided_regex, not both.");
  return request;
}

TokenizeRequest parse_tokenize_request(const ordered_json& body) {
  const Fields fields(body, "");
  TokenizeRequest request;
  request.model = model_field(fields);
  const bool has_prompt = fields.find("prompt") != nullptr;
  const bool has_messages = fields.find("messages") != nullptr;
  if (has_prompt == has_messages) {
    throw invalid_request("Give exactly one of 'prompt' and 'messages'.", "prompt",
                          "invalid_value");
  }
  if (has_prompt) {
    request.prompt = fields.string("prompt");
  } else {
    request.chat = chat_conversation(fields);
  }
  return request;
}

DetokenizeRequest parse_detokenize_request(const ordered_json& body) {
  const Fields fields(body, "");
  DetokenizeRequest request;
  request.model = model_field(fields);
  const ordered_json* tokens = fields.find("tokens");
  if (!tokens) fields.missing("tokens");
  if (!tokens->is_array()) fields.type_error("tokens", "an array of token ids", *tokens);
  request.tokens = token_id_list(*tokens, "tokens");
  return request;
}

ChatPrompt render_chat_prompt(const ChatCompletionRequest& request) {
  std::vector<ChatMessage> messages = request.messages;
  ChatPrompt prompt;
  // A constrained answer (JSON, a choice, a regex) starts at once: no thinking before it.
  const bool constrained = request.response_format || request.generation.choices || request.generation.regex;
  prompt.mode = constrained ? ThinkingMode::kChat : request.thinking;
  try {
    if (request.tool_choice != ToolChoice::kNone) {
      attach_tools(messages, request.tools);
      prompt.parse_tool_calls = true;
    }
    if (request.response_format) {
      if (messages.empty() || messages.front().role != ChatRole::kSystem) {
        ChatMessage system;
        system.role = ChatRole::kSystem;
        messages.insert(messages.begin(), std::move(system));
      }
      if (!messages.front().response_format) {
        messages.front().response_format = request.response_format;
      }
    }
    if (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kNamed) {
      prompt.mode = ThinkingMode::kChat;
      prompt.tool_call_prefill = "\n\n<" + std::string(chat_token::kDsml) + "tool_calls>\n";
      if (request.tool_choice == ToolChoice::kNamed) {
        prompt.tool_call_prefill += "<" + std::string(chat_token::kDsml) + "invoke name=\"" +
                                    request.tool_choice_name + "\">\n";
      }
    }
    ChatEncodeOptions options;
    options.mode = prompt.mode;
    options.reasoning_effort = request.reasoning_effort;
    prompt.text = encode_chat_prompt(messages, options) + prompt.tool_call_prefill;
  } catch (const UsageError& e) {
    throw invalid_request(e.what(), "tools");
  } catch (const FormatError& e) {
    rethrow_as_invalid_request(e);
  }
  return prompt;
}

}  // namespace dsv4::server
