// `dsv4 tokenize`: text to token ids and back with a tokenizer.json, one JSON object per line,
// for scripts and for the cross-check against Hugging Face tokenizers.
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace dsv4::tools {
namespace {

using nlohmann::json;

struct TokenizeOptions {
  std::string tokenizer_file;
  bool decode = false;
};

// One input line -> one output object; errors name the line.
json convert_line(const Tokenizer& tokenizer, const std::string& line, size_t line_number,
                  bool decode) {
  const std::string where = "stdin line " + std::to_string(line_number);
  json input;
  try {
    input = json::parse(line);
  } catch (const json::exception& e) {
    throw FormatError(where + ": not valid JSON: " + e.what());
  }
  if (!decode) {
    const auto text = input.is_object() ? input.find("text") : input.end();
    if (text == input.end() || !text->is_string()) {
      throw FormatError(where + ": expected an object {\"text\": \"...\"}");
    }
    return {{"ids", tokenizer.encode(text->get_ref<const std::string&>())}};
  }
  const auto ids_json = input.is_object() ? input.find("ids") : input.end();
  if (ids_json == input.end() || !ids_json->is_array()) {
    throw FormatError(where + ": expected an object {\"ids\": [...]}");
  }
  std::vector<int32_t> ids;
  ids.reserve(ids_json->size());
  for (const json& id : *ids_json) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= tokenizer.vocab_size()) {
      throw UsageError(where + ": id " + id.dump() + " is not a token id (0 to " +
                       std::to_string(tokenizer.vocab_size() - 1) + ")");
    }
    ids.push_back(id.get<int32_t>());
  }
  try {
    return {{"text", tokenizer.decode(ids)}};
  } catch (const UsageError& e) {
    throw UsageError(where + ": " + e.what());
  }
}

void run_tokenize(const TokenizeOptions& options) {
  const Tokenizer tokenizer = Tokenizer::load(options.tokenizer_file);
  std::string line;
  for (size_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    std::cout << convert_line(tokenizer, line, line_number, options.decode).dump() << '\n'
              << std::flush;
  }
  if (std::cin.bad()) throw IoError("stdin: read error");
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command = app.add_subcommand(
      "tokenize",
      "Read JSON lines {\"text\": ...} on stdin, write {\"ids\": [...]} per line (no special "
      "tokens added); with --decode, {\"ids\": [...]} in, {\"text\": ...} out");
  command->add_option("--tokenizer", options->tokenizer_file, "tokenizer.json to use")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_flag("--decode", options->decode, "ids to text instead of text to ids");
  command->callback([options] { run_tokenize(*options); });
}

}  // namespace dsv4::tools
