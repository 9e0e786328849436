// --generation-config: a generation_config.json's sampling fields become the defaults of requests
// that leave them out (server/generation_config.h, SamplingDefaults in the request parsers).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "server/generation_config.h"
#include "server/openai_request.h"

namespace dsv4::server {
namespace {

// `text` as a generation_config.json in a fresh folder of its own.
std::filesystem::path config_file(const std::string& text) {
  static int count = 0;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("dsv4_generation_config_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "generation_config.json") << text;
  return dir / "generation_config.json";
}

TEST(GenerationConfig, DeepSeekV4sFileSetsTemperatureAndTopP) {
  const GenerationConfig c = load_generation_config(std::filesystem::path(DSV4_SHARED_DIR) / "data/configs" /
                                                    "deepseek-v4-pro.generation_config.json");
  EXPECT_EQ(c.overridden, (std::vector<std::string>{"temperature=1", "top_p=1"}));
  EXPECT_EQ(c.defaults.temperature, 1.0f);
  EXPECT_EQ(c.defaults.top_p, 1.0f);
  EXPECT_FALSE(c.defaults.max_tokens);
}

TEST(GenerationConfig, EverySamplingFieldIsReadAndTheRestIgnored) {
  const std::filesystem::path file = config_file(
      R"({"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
          "repetition_penalty": 1.1, "max_new_tokens": 300, "eos_token_id": [1, 2]})");
  const GenerationConfig c = load_generation_config(file);
  std::filesystem::remove_all(file.parent_path());
  EXPECT_EQ(c.overridden, (std::vector<std::string>{"temperature=0.6", "top_p=0.95", "top_k=40", "min_p=0.05",
                                                    "repetition_penalty=1.1", "max_tokens=300"}));
  EXPECT_EQ(c.defaults.temperature, 0.6f);
  EXPECT_EQ(c.defaults.top_p, 0.95f);
  EXPECT_EQ(c.defaults.top_k, 40);
  EXPECT_EQ(c.defaults.min_p, 0.05f);
  EXPECT_EQ(c.defaults.repetition_penalty, 1.1f);
  EXPECT_EQ(c.defaults.max_tokens, 300);
}

TEST(GenerationConfig, BadFilesAreRefusedNamingTheFieldAndValue) {
  const auto refused = [](const std::string& text, const std::string& words) {
    const std::filesystem::path file = config_file(text);
    try {
      load_generation_config(file);
      ADD_FAILURE() << "accepted " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(file.parent_path());
  };
  refused(R"({"temperature": 3})", "temperature = 3 is not a number in [0, 2]");
  refused(R"({"top_p": 0})", "top_p = 0 is not a number in (0, 1]");
  refused(R"({"temperature": "hot"})", "temperature = \"hot\" is not a number");
  refused(R"({"max_new_tokens": 0})", "max_new_tokens = 0 is not an integer of at least 1");
  refused(R"({"top_k": 1.5})", "top_k = 1.5 is not an integer");
  refused("[1, 2]", "not a JSON object");
  refused("{", "not a JSON object");
  EXPECT_THROW(load_generation_config("/nonexistent/generation_config.json"), IoError);
}

TEST(SamplingDefaults, FillTheFieldsARequestLeavesOut) {
  SamplingDefaults d;
  d.temperature = 0.6f;
  d.top_p = 0.95f;
  d.top_k = 40;
  d.min_p = 0.05f;
  d.repetition_penalty = 1.1f;
  d.max_tokens = 300;
  const auto chat = [&](const std::string& fields) {
    return parse_chat_completion_request(
               parse_request_body(R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}"), d)
        .generation;
  };
  const GenerationOptions left_out = chat("");
  EXPECT_EQ(left_out.temperature, 0.6f);
  EXPECT_EQ(left_out.top_p, 0.95f);
  EXPECT_EQ(left_out.top_k, 40);
  EXPECT_EQ(left_out.min_p, 0.05f);
  EXPECT_EQ(left_out.repetition_penalty, 1.1f);
  EXPECT_EQ(left_out.max_tokens, 300);
  const GenerationOptions given =
      chat(R"(, "temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0, "repetition_penalty": 1, "max_completion_tokens": 7)");
  EXPECT_EQ(given.temperature, 0.0f);
  EXPECT_EQ(given.top_p, 1.0f);
  EXPECT_EQ(given.top_k, 0);
  EXPECT_EQ(given.min_p, 0.0f);
  EXPECT_EQ(given.repetition_penalty, 1.0f);
  EXPECT_EQ(given.max_tokens, 7);
  EXPECT_FALSE(parse_chat_completion_request(parse_request_body(R"({"messages": [{"role": "user", "content": "hi"}]})"))
                   .generation.max_tokens);

  EXPECT_EQ(parse_completion_request(parse_request_body(R"({"prompt": "x"})"), d).generation.max_tokens, 300);
  EXPECT_EQ(parse_completion_request(parse_request_body(R"({"prompt": "x", "max_tokens": 5})"), d).generation.max_tokens, 5);
  EXPECT_EQ(parse_completion_request(parse_request_body(R"({"prompt": "x"})")).generation.max_tokens,
            kDefaultCompletionMaxTokens);
  EXPECT_EQ(parse_completion_request(parse_request_body(R"({"prompt": "x"})"), d).generation.temperature, 0.6f);
}

}  // namespace
}  // namespace dsv4::server
