// The HTTP server on 127.0.0.1 with a scripted engine behind it: every route, streamed and not;
// response_format's JSON constraint reaching the engine; the bad-input list of issue 14 (each an
// OpenAI error object with its status, the server still serving after it); a client that goes
// away cancels its request; drain waits for open requests; /ping, /version, allowed_token_ids,
// bad_words and truncate_prompt_tokens.
#include <gtest/gtest.h>

#include <httplib.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/http_server.h"
#include "tokenizer/chat_encoding.h"

namespace dsv4::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A stream that hands out its chunks one per next_for(), or (when `endless`) tokens forever
// until cancelled.
class ScriptedStream final : public GenerationStream {
 public:
  ScriptedStream(std::deque<OutputChunk> chunks, bool endless, std::atomic<int>& cancels,
                 std::atomic<int>& open)
      : chunks_(std::move(chunks)), endless_(endless), cancels_(cancels), open_(open) {
    ++open_;
  }
  ~ScriptedStream() override {
    if (!done_) ++cancels_;
    --open_;
  }
  std::optional<OutputChunk> next_for(std::chrono::milliseconds) override {
    if (done_) throw UsageError("stream done");
    if (cancelled_) return finish_with(FinishReason::kCancelled);
    if (endless_) {
      std::this_thread::sleep_for(5ms);
      OutputChunk chunk;
      chunk.tokens.push_back({7, -0.5f, {}});
      chunk.text = "x";
      return chunk;
    }
    OutputChunk chunk = std::move(chunks_.front());
    chunks_.pop_front();
    done_ = chunk.finish.has_value();
    return chunk;
  }
  void cancel() override {
    if (!cancelled_ && !done_) ++cancels_;
    cancelled_ = true;
  }

 private:
  OutputChunk finish_with(FinishReason reason) {
    OutputChunk chunk;
    chunk.finish = reason;
    chunk.metrics = RequestMetrics{};
    done_ = true;
    return chunk;
  }
  std::deque<OutputChunk> chunks_;
  bool endless_;
  bool done_ = false;
  bool cancelled_ = false;
  std::atomic<int>& cancels_;
  std::atomic<int>& open_;
};

// Answers every request with `reply` cut into pieces of `piece_bytes`, one token each, or with
// endless tokens; remembers the last request.
class ScriptedEngine final : public ServingEngine {
 public:
  std::unique_ptr<GenerationStream> submit(GenerateRequest request) override {
    const std::lock_guard lock(mutex_);
    if (broken) throw CommError("the engine cannot serve: " + *broken);
    last_request = request;
    std::deque<OutputChunk> chunks;
    for (size_t at = 0; at < reply.size(); at += piece_bytes) {
      OutputChunk chunk;
      chunk.tokens.push_back({static_cast<int32_t>(100 + at), -0.25f, {{5, -0.25f}, {6, -2.0f}}});
      chunk.text = reply.substr(at, piece_bytes);
      chunks.push_back(std::move(chunk));
    }
    if (chunks.empty()) chunks.emplace_back();
    if (request.prompt_logprobs)  // every prompt token after the first at -1, one alternative
      for (size_t i = 1; i < request.prompt.size(); ++i)
        chunks.front().prompt_logprobs.push_back({request.prompt[i], -1.0f, {{9, -0.5f}}, 2});
    chunks.back().finish = finish;
    const auto now = EngineClock::now();
    chunks.back().metrics = RequestMetrics{now - 2s, now - 1s, now,
                                           static_cast<int64_t>(request.prompt.size()),
                                           static_cast<int64_t>(chunks.size()), 0};
    return std::make_unique<ScriptedStream>(std::move(chunks), endless, cancels, open);
  }
  EngineStats stats() const override {
    EngineStats s;
    s.running = open;
    s.generation_tokens = 42;
    return s;
  }
  int64_t max_model_len() const override { return 512; }
  std::optional<std::string> fault() const override {
    const std::lock_guard lock(mutex_);
    return broken;
  }

  std::string reply = "Hello there.";
  size_t piece_bytes = 3;
  FinishReason finish = FinishReason::kStop;
  bool endless = false;
  GenerateRequest last_request;
  std::atomic<int> cancels{0};
  std::atomic<int> open{0};
  std::optional<std::string> broken;  // fault(); set, submit throws CommError as Engine's does
  mutable std::mutex mutex_;
};

const std::filesystem::path kTokenizer = DSV4_TOKENIZER_JSON;

// POSTs a streamed request and reads its body until `keep_reading` says stop (then hangs up).
void post_reading(int port, const std::string& body, const std::function<bool(size_t)>& keep_reading) {
  httplib::Client client("127.0.0.1", port);
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = body;
  request.set_header("Content-Type", "application/json");
  request.set_header("Authorization", "Bearer secret");
  size_t received = 0;
  request.content_receiver = [&](const char*, size_t length, uint64_t, uint64_t) {
    received += length;
    return keep_reading(received);
  };
  client.send(request);
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokenizer)) GTEST_SKIP() << kTokenizer << " absent; run scripts/setup.sh";
    static const auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(kTokenizer));
    tokenizer_ = tokenizer;
    ServerOptions options;
    options.port = 0;
    options.served_model_name = "tiny";
    options.api_key = "secret";
    options.max_body_bytes = 4096;
    options.max_open_requests = 2;
    server_ = std::make_unique<OpenAiServer>(options, tokenizer);
    port_ = server_->start();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_bearer_token_auth("secret");
    client_->set_read_timeout(10, 0);
  }

  std::shared_ptr<const Tokenizer> tokenizer_;

  httplib::Result post(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }

  // The body's OpenAI error, checked for shape; returns its param (or "null").
  std::string expect_error(const httplib::Result& result, int status) {
    EXPECT_TRUE(result) << "no response";
    if (!result) return "";
    EXPECT_EQ(result->status, status) << result->body;
    const json body = json::parse(result->body);
    EXPECT_TRUE(body["error"]["message"].is_string()) << result->body;
    EXPECT_TRUE(body["error"]["type"].is_string()) << result->body;
    EXPECT_TRUE(body["error"].contains("code")) << result->body;
    return body["error"]["param"].is_null() ? "null" : body["error"]["param"].get<std::string>();
  }

  // The events of a streamed body, [DONE] last.
  static std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> data;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      const size_t end = body.find("\n\n", at);
      data.push_back(body.substr(at + 6, end - at - 6));
      at = end;
    }
    return data;
  }

  ScriptedEngine engine_;
  std::unique_ptr<OpenAiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

TEST_F(HttpServerTest, HealthIs503UntilTheEngineIsSet) {
  const auto loading = client_->Get("/health");
  ASSERT_TRUE(loading);
  EXPECT_EQ(loading->status, 503);
  expect_error(post("/v1/completions", R"({"prompt": "hi"})"), 503);
  server_->set_engine(engine_);
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

// An engine that can no longer serve (data-parallel ranks whose expert group broke): /health is
// 503 saying why, as vLLM's is for a dead engine, and requests are 503 with the reason.
TEST_F(HttpServerTest, HealthIs503OnceTheEngineCannotServe) {
  server_->set_engine(engine_);
  EXPECT_EQ(client_->Get("/health")->status, 200);
  {
    const std::lock_guard lock(engine_.mutex_);
    engine_.broken = "rank 1's forward failed: out of memory";
  }
  const auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_NE(health->body.find("rank 1's forward failed: out of memory"), std::string::npos) << health->body;
  const auto refused = post("/v1/completions", R"({"prompt": "hi"})");
  expect_error(refused, 503);
  EXPECT_NE(refused->body.find("the engine cannot serve"), std::string::npos) << refused->body;
}

// /ping is /health by another name (GET or POST, no key, no body); /version is dsv4's.
TEST_F(HttpServerTest, PingFollowsHealthAndVersionIsTheProjects) {
  httplib::Client anonymous("127.0.0.1", port_);
  EXPECT_EQ(anonymous.Get("/ping")->status, 503);
  EXPECT_EQ(anonymous.Post("/ping")->status, 503);
  server_->set_engine(engine_);
  for (const auto& ping : {anonymous.Get("/ping"), anonymous.Post("/ping")}) {
    ASSERT_TRUE(ping);
    EXPECT_EQ(ping->status, 200);
    EXPECT_EQ(ping->body, "");
  }
  const auto version = client_->Get("/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(version->status, 200);
  EXPECT_EQ(json::parse(version->body), json({{"version", DSV4_EXPECTED_VERSION}}));
}

// allowed_token_ids reaches the engine's sampling parameters as given.
TEST_F(HttpServerTest, AllowedTokenIdsReachTheEngine) {
  server_->set_engine(engine_);
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi", "allowed_token_ids": [7, 3]})")->status, 200);
  EXPECT_EQ(engine_.last_request.sampling.allowed_token_ids, (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(post("/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "hi"}], "allowed_token_ids": [4]})")->status,
            200);
  EXPECT_EQ(engine_.last_request.sampling.allowed_token_ids, std::vector<int32_t>{4});
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "hi", "allowed_token_ids": []})"), 400),
            "allowed_token_ids");
}

// bad_words reach the engine as vLLM's token sequences, on both routes: each word with its leading
// whitespace stripped, then with a space before it when that spells it with as many tokens and
// another first one (" Paris" does; " 12" is a space token then "12", which is left out); a
// word of only whitespace is a 400 naming its index.
TEST_F(HttpServerTest, BadWordsReachTheEngineAsTokenSequences) {
  server_->set_engine(engine_);
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi", "bad_words": ["  Paris", "12"]})")->status, 200);
  const std::vector<int32_t> paris = tokenizer_->encode("Paris"), spaced_paris = tokenizer_->encode(" Paris");
  ASSERT_EQ(paris.size(), spaced_paris.size());
  ASSERT_NE(paris, spaced_paris);
  ASSERT_NE(tokenizer_->encode(" 12").size(), tokenizer_->encode("12").size());
  const std::vector<std::vector<int32_t>> expected = {paris, spaced_paris, tokenizer_->encode("12")};
  EXPECT_EQ(engine_.last_request.sampling.bad_words_ids, expected);
  EXPECT_EQ(post("/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "hi"}], "bad_words": ["Paris"]})")->status,
            200);
  EXPECT_EQ(engine_.last_request.sampling.bad_words_ids, (std::vector<std::vector<int32_t>>{paris, spaced_paris}));
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "hi", "bad_words": ["a", " \n "]})"), 400),
            "bad_words[1]");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "hi", "bad_words": "a"})"), 400), "bad_words");
}

// truncate_prompt_tokens: the engine gets the prompt's last k tokens (the encoded conversation's
// for chat), as if they had been sent; the usage counts them; a k of at least the prompt or -1
// keeps it whole; a k beyond the model's length is refused, as vLLM does.
TEST_F(HttpServerTest, TruncatePromptTokensKeepsTheLastTokens) {
  server_->set_engine(engine_);
  const json direct = json::parse(post("/v1/completions", R"({"prompt": [4, 5, 6]})")->body);
  const json cut = json::parse(post("/v1/completions", R"({"prompt": [1, 2, 3, 4, 5, 6], "truncate_prompt_tokens": 3})")->body);
  EXPECT_EQ(engine_.last_request.prompt, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(cut["choices"], direct["choices"]);
  EXPECT_EQ(cut["usage"], direct["usage"]);
  EXPECT_EQ(cut["usage"]["prompt_tokens"], 3);
  for (const char* k : {"6", "100", "-1"}) {
    post("/v1/completions", std::string(R"({"prompt": [1, 2, 3, 4, 5, 6], "truncate_prompt_tokens": )") + k + "}");
    EXPECT_EQ(engine_.last_request.prompt, (std::vector<int32_t>{1, 2, 3, 4, 5, 6})) << k;
  }
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": [1, 2], "truncate_prompt_tokens": 513})"), 400),
            "truncate_prompt_tokens");

  const std::string messages = R"("messages": [{"role": "user", "content": "Tell me a long story about a fox."}])";
  post("/v1/chat/completions", "{" + messages + "}");
  const std::vector<int32_t> whole = engine_.last_request.prompt;
  ASSERT_GT(whole.size(), 4u);
  const json chat = json::parse(post("/v1/chat/completions", "{" + messages + R"(, "truncate_prompt_tokens": 4})")->body);
  EXPECT_EQ(engine_.last_request.prompt, std::vector<int32_t>(whole.end() - 4, whole.end()));
  EXPECT_EQ(chat["usage"]["prompt_tokens"], 4);

  // echo repeats what was kept.
  const json echoed = json::parse(
      post("/v1/completions", R"({"prompt": "Hello world", "echo": true, "truncate_prompt_tokens": 1})")->body);
  EXPECT_EQ(echoed["choices"][0]["text"], " worldHello there.");
}

TEST_F(HttpServerTest, ChatNonStreamedWithUsageAndLogprobs) {
  server_->set_engine(engine_);
  engine_.reply = "I reason.</think>The answer." + std::string(chat_token::kEos);
  const auto result = post("/v1/chat/completions", R"({"model": "tiny",
      "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": true},
      "logprobs": true, "top_logprobs": 2, "temperature": 0, "stop": ["zz"], "max_tokens": 20})");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const json body = json::parse(result->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny");
  const json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["content"], "The answer.");
  EXPECT_EQ(message["reasoning_content"], "I reason.");
  EXPECT_EQ(message["reasoning"], "I reason.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  const size_t chunks = (engine_.reply.size() + 2) / 3;
  EXPECT_EQ(body["usage"]["completion_tokens"], chunks);
  EXPECT_EQ(body["choices"][0]["logprobs"]["content"].size(), chunks);
  EXPECT_EQ(body["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  // What reached the engine.
  EXPECT_EQ(engine_.last_request.sampling.temperature, 0.0f);
  EXPECT_EQ(engine_.last_request.stop.stop_strings, std::vector<std::string>{"zz"});
  EXPECT_EQ(engine_.last_request.stop.max_tokens, 20);
  EXPECT_TRUE(engine_.last_request.sampling.logprobs);
  EXPECT_EQ(body["usage"]["prompt_tokens"], engine_.last_request.prompt.size());
}

TEST_F(HttpServerTest, JsonResponseFormatsConstrainTheChatAnswer) {
  server_->set_engine(engine_);
  engine_.reply = R"({"answer": 42})";
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}],
      "chat_template_kwargs": {"thinking": true}, "response_format": )";
  for (const char* format : {R"({"type": "json_object"})",
                             R"({"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}})"}) {
    const auto result = post("/v1/chat/completions", chat + format + "}");
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 200) << result->body;
    EXPECT_EQ(engine_.last_request.format, OutputFormat::kJsonObject) << format;
    // Thinking is off: the answer is content, not reasoning.
    EXPECT_EQ(json::parse(result->body)["choices"][0]["message"]["content"], engine_.reply) << format;
  }
  ASSERT_EQ(post("/v1/chat/completions", chat + R"({"type": "text"}})")->status, 200);
  EXPECT_EQ(engine_.last_request.format, OutputFormat::kText);
  ASSERT_EQ(post("/v1/completions", R"({"prompt": "hi"})")->status, 200);
  EXPECT_EQ(engine_.last_request.format, OutputFormat::kText);
}

// guided_regex (chat) and structured_outputs.regex (completions) reach the engine as the regex
// output format with the compiled pattern, thinking off; a pattern the compiler refuses is a 400.
TEST_F(HttpServerTest, GuidedRegexReachesTheEngineAsTheRegexFormat) {
  server_->set_engine(engine_);
  engine_.reply = "42";
  const auto chat = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
      "chat_template_kwargs": {"thinking": true}, "guided_regex": "\\d+"})");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(engine_.last_request.format, OutputFormat::kRegex);
  ASSERT_NE(engine_.last_request.regex, nullptr);
  EXPECT_TRUE(engine_.last_request.regex->full_match("123"));
  EXPECT_EQ(json::parse(chat->body)["choices"][0]["message"]["content"], engine_.reply);  // content, not reasoning
  ASSERT_EQ(post("/v1/completions", R"({"prompt": "hi", "structured_outputs": {"regex": "[ab]"}})")->status, 200);
  EXPECT_EQ(engine_.last_request.format, OutputFormat::kRegex);
  ASSERT_NE(engine_.last_request.regex, nullptr);
  EXPECT_TRUE(engine_.last_request.regex->full_match("b"));
  const auto bad = post("/v1/completions", R"({"prompt": "hi", "guided_regex": "(?<=a)b"})");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("lookbehind"), std::string::npos) << bad->body;
}

TEST_F(HttpServerTest, ChatStreamedToolCallMatchesTheNonStreamedAnswer) {
  server_->set_engine(engine_);
  engine_.reply =
      "Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + std::string(chat_token::kEos);
  const std::string request = R"({"messages": [{"role": "user", "content": "weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather"}}]})";
  const json whole = json::parse(post("/v1/chat/completions", request)->body);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  const json& call = whole["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city": "Paris"})");

  const auto streamed = post("/v1/chat/completions",
                             request.substr(0, request.size() - 1) +
                                 R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = sse_data(streamed->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content, arguments, name;
  std::optional<std::string> finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    if (chunk["choices"].empty()) {
      EXPECT_EQ(i, events.size() - 2) << "usage comes last";
      EXPECT_EQ(chunk["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
      continue;
    }
    EXPECT_TRUE(chunk["usage"].is_null());
    const json& delta = chunk["choices"][0]["delta"];
    if (i == 0) {
      EXPECT_EQ(delta["role"], "assistant");
    }
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    for (const json& piece : delta.value("tool_calls", json::array())) {
      if (piece["function"].contains("name")) {
        name = piece["function"]["name"];
        EXPECT_EQ(piece["id"], "call_" + piece["id"].get<std::string>().substr(5));
      }
      arguments += piece["function"]["arguments"].get<std::string>();
    }
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, whole["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, call["function"]["arguments"]);
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(HttpServerTest, CompletionsStreamedAndNot) {
  server_->set_engine(engine_);
  engine_.finish = FinishReason::kLength;
  const json whole = json::parse(post("/v1/completions", R"({"prompt": [1, 2, 3], "logprobs": 1})")->body);
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "Hello there.");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(whole["choices"][0]["logprobs"]["tokens"].size(), 4u);
  EXPECT_EQ(engine_.last_request.stop.max_tokens, 16);

  const auto streamed = post("/v1/completions", R"({"prompt": "hi", "stream": true})");
  std::string text;
  const auto events = sse_data(streamed->body);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello there.");
  EXPECT_EQ(events.back(), "[DONE]");
}

// n > 1 and several prompts: one engine request per choice (a seeded one draws with seed + i), the choices' index in
// every object, usage summing their tokens, one usage chunk and one [DONE] after all of them;
// more choices than open requests allowed get 429 and cancel the ones submitted.
TEST_F(HttpServerTest, SeveralChoicesStreamedAndNot) {
  server_->set_engine(engine_);
  engine_.finish = FinishReason::kLength;
  const json whole = json::parse(post("/v1/completions", R"({"prompt": [1, 2, 3], "n": 2, "seed": 5})")->body);
  ASSERT_EQ(whole["choices"].size(), 2u) << whole.dump();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(whole["choices"][i]["index"], i);
    EXPECT_EQ(whole["choices"][i]["text"], "Hello there.");
  }
  EXPECT_EQ(whole["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(whole["usage"]["completion_tokens"], 8);
  EXPECT_EQ(engine_.last_request.sampling.seed, 6u);

  const auto streamed = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 2,
      "stream": true, "stream_options": {"include_usage": true}})");
  const auto events = sse_data(streamed->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 8);
  std::map<int, std::string> content;
  std::map<int, int> roles, finishes;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    ASSERT_EQ(chunk["choices"].size(), 1u) << events[i];
    const json& choice = chunk["choices"][0];
    const int index = choice["index"];
    if (choice["delta"].contains("role")) ++roles[index];
    if (choice["delta"].contains("content")) content[index] += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) ++finishes[index];
  }
  EXPECT_EQ(roles, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(content[0], "Hello there.");
  EXPECT_EQ(content[1], "Hello there.");

  // The streamed answer's choices are let go once the server has finished the response, which
  // may be just after the client has it.
  for (int i = 0; i < 200 && engine_.open > 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(engine_.open, 0);

  // Several prompts: n choices each, in prompt order; every prompt's tokens count once.
  const json batch = json::parse(post("/v1/completions", R"({"prompt": [[1, 2, 3], [4, 5]]})")->body);
  ASSERT_EQ(batch["choices"].size(), 2u) << batch.dump();
  EXPECT_EQ(batch["choices"][1]["index"], 1);
  EXPECT_EQ(batch["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(engine_.last_request.prompt, (std::vector<int32_t>{4, 5}));

  const int cancels = engine_.cancels;
  expect_error(post("/v1/completions", R"({"prompt": "a", "n": 3})"), 429);
  EXPECT_EQ(engine_.cancels, cancels + 2);
  EXPECT_EQ(engine_.open, 0);
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "a"})")->status, 200);
}

// echo: the prompt's text first, with logprobs the prompt tokens' first (the first one's null,
// asked of the engine as prompt logprobs), streamed as the first event.
TEST_F(HttpServerTest, CompletionsEchoThePrompt) {
  server_->set_engine(engine_);
  const json plain = json::parse(post("/v1/completions", R"({"prompt": "hi", "echo": true})")->body);
  EXPECT_EQ(plain["choices"][0]["text"], "hiHello there.");
  EXPECT_FALSE(engine_.last_request.prompt_logprobs.has_value());

  const json scored = json::parse(post("/v1/completions", R"({"prompt": [1, 2, 3], "echo": true, "logprobs": 1})")->body);
  EXPECT_EQ(engine_.last_request.prompt_logprobs, 1);
  const json& logprobs = scored["choices"][0]["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), 3u + 4u) << scored.dump();
  EXPECT_TRUE(logprobs["token_logprobs"][0].is_null());
  EXPECT_TRUE(logprobs["top_logprobs"][0].is_null());
  EXPECT_EQ(logprobs["token_logprobs"][1], -1.0);
  EXPECT_EQ(logprobs["token_logprobs"][3], -0.25);  // the first generated token
  EXPECT_EQ(logprobs["text_offset"][3], scored["choices"][0]["text"].get<std::string>().find("Hel"));

  const auto streamed = post("/v1/completions", R"({"prompt": "hi", "echo": true, "stream": true})");
  const auto events = sse_data(streamed->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(json::parse(events[0])["choices"][0]["text"], "hi");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "hiHello there.");
}

// vLLM's prompt_logprobs: per choice in completions, at the top of a chat completion; null for the
// first prompt token, then the prompt token (its rank) and the alternatives (rank by place).
TEST_F(HttpServerTest, PromptLogprobsAsVllmGivesThem) {
  server_->set_engine(engine_);
  const json scored = json::parse(post("/v1/completions", R"({"prompt": [1, 2, 3], "prompt_logprobs": 1})")->body);
  EXPECT_EQ(engine_.last_request.prompt_logprobs, 1);
  const json& list = scored["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(list.size(), 3u) << scored.dump();
  EXPECT_TRUE(list[0].is_null());
  EXPECT_EQ(list[1]["2"]["logprob"], -1.0);
  EXPECT_EQ(list[1]["2"]["rank"], 2);
  EXPECT_TRUE(list[1]["2"]["decoded_token"].is_string());
  EXPECT_EQ(list[2]["9"]["logprob"], -0.5);
  EXPECT_EQ(list[2]["9"]["rank"], 1);
  EXPECT_EQ(list[2].begin().key(), "3");  // the prompt token first
  EXPECT_FALSE(scored["choices"][0].contains("logprobs") && !scored["choices"][0]["logprobs"].is_null());

  const json alone = json::parse(post("/v1/completions", R"({"prompt": [1, 2], "prompt_logprobs": 0})")->body);
  EXPECT_EQ(alone["choices"][0]["prompt_logprobs"][1].size(), 1u) << alone.dump();

  // With echo and logprobs too, the engine computes the larger count; each output keeps its own.
  const json both = json::parse(
      post("/v1/completions", R"({"prompt": [1, 2], "echo": true, "logprobs": 0, "prompt_logprobs": 1})")->body);
  EXPECT_EQ(engine_.last_request.prompt_logprobs, 1);
  EXPECT_EQ(both["choices"][0]["prompt_logprobs"][1].size(), 2u);
  EXPECT_TRUE(both["choices"][0]["logprobs"]["top_logprobs"][1].empty()) << both.dump();

  const json chat = json::parse(
      post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 0})")->body);
  ASSERT_TRUE(chat["prompt_logprobs"].is_array()) << chat.dump();
  EXPECT_EQ(chat["prompt_logprobs"].size(), engine_.last_request.prompt.size());
  EXPECT_TRUE(chat["prompt_logprobs"][0].is_null());
  expect_error(post("/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 0, "stream": true})"),
               400);
}

TEST_F(HttpServerTest, ModelsTokenizeDetokenizeMetrics) {
  server_->set_engine(engine_);
  const json models = json::parse(client_->Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["max_model_len"], 512);
  const json tokens = json::parse(post("/tokenize", R"({"prompt": "Hello world"})")->body);
  EXPECT_GT(tokens["count"], 0);
  const json text = json::parse(post("/detokenize", json{{"tokens", tokens["tokens"]}}.dump())->body);
  EXPECT_EQ(text["prompt"], "Hello world");
  expect_error(post("/detokenize", R"({"tokens": [999999999]})"), 400);
  post("/v1/completions", R"({"prompt": "hi"})");
  const std::string metrics = client_->Get("/metrics")->body;
  EXPECT_NE(metrics.find("dsv4:generation_tokens_total{model_name=\"tiny\"} 42"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dsv4:request_success_total{model_name=\"tiny\",finished_reason=\"stop\"} 1"),
            std::string::npos);
  // The scripted request took 1 s to its first token: in the le="1" bucket, not in le="0.75".
  EXPECT_NE(metrics.find("dsv4:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.75\"} 0"),
            std::string::npos);
  EXPECT_NE(metrics.find("dsv4:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"1\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("dsv4:time_to_first_token_seconds_count{model_name=\"tiny\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("dsv4:e2e_request_latency_seconds_sum{model_name=\"tiny\"} 2"),
            std::string::npos);
}

TEST_F(HttpServerTest, BadInputGetsOpenAiErrorsAndTheServerStaysUp) {
  server_->set_engine(engine_);
  // 401: no key or the wrong one; /health needs none.
  httplib::Client anonymous("127.0.0.1", port_);
  expect_error(anonymous.Post("/v1/completions", R"({"prompt": "hi"})", "application/json"), 401);
  expect_error(anonymous.Get("/v1/models"), 401);
  anonymous.set_bearer_token_auth("wrong");
  expect_error(anonymous.Get("/metrics"), 401);
  EXPECT_EQ(anonymous.Get("/health")->status, 200);
  // 400: malformed JSON, wrong types, n > 1, prompt too long.
  expect_error(post("/v1/chat/completions", "{\"messages\": [}"), 400);
  expect_error(post("/v1/chat/completions", "not json at all"), 400);
  EXPECT_EQ(expect_error(post("/v1/chat/completions", R"({"messages": "hi"})"), 400), "messages");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "a", "max_tokens": "5"})"), 400),
            "max_tokens");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "a", "n": 65})"), 400), "n");
  EXPECT_EQ(expect_error(post("/v1/completions", json{{"prompt", std::vector<int>(512, 1)}}.dump()), 400),
            "prompt");
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 511})"), 400),
            "max_tokens");
  // 404: unknown model, unknown route.
  EXPECT_EQ(expect_error(post("/v1/completions", R"({"prompt": "a", "model": "gpt-9"})"), 404), "model");
  expect_error(client_->Get("/v1/nothing"), 404);
  // 413: a body over the limit.
  expect_error(post("/v1/completions", json{{"prompt", std::string(5000, 'a')}}.dump()), 413);
  // Still serving.
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi"})")->status, 200);
}

TEST_F(HttpServerTest, TooManyOpenRequestsGet429) {
  server_->set_engine(engine_);
  engine_.endless = true;
  std::vector<std::thread> streams;
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(std::make_unique<httplib::Client>("127.0.0.1", port_));
    clients.back()->set_bearer_token_auth("secret");
    httplib::Client* client = clients.back().get();
    streams.emplace_back([client] {
      // Reads until cut off by the stop below.
      client->Post("/v1/completions", R"({"prompt": "hi", "stream": true, "max_tokens": 10})",
                   "application/json");
    });
  }
  for (int i = 0; i < 200 && server_->open_requests() < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server_->open_requests(), 2);
  expect_error(post("/v1/completions", R"({"prompt": "hi"})"), 429);
  for (auto& client : clients) client->stop();
  for (auto& stream : streams) stream.join();
}

// The client goes away mid-stream: the request is cancelled and its slot freed.
TEST_F(HttpServerTest, ClientDisconnectCancelsTheRequest) {
  server_->set_engine(engine_);
  engine_.endless = true;
  post_reading(port_, R"({"prompt": "hi", "stream": true, "max_tokens": 50})",
               [](size_t received) { return received < 2000; });
  for (int i = 0; i < 300 && (engine_.open > 0 || server_->open_requests() > 0); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(engine_.cancels, 1);
  EXPECT_EQ(engine_.open, 0);
  EXPECT_EQ(server_->open_requests(), 0);
}

TEST_F(HttpServerTest, DrainRefusesNewRequestsAndWaitsForOpenOnes) {
  server_->set_engine(engine_);
  engine_.endless = true;
  std::thread stream([this] {
    post_reading(port_, R"({"prompt": "hi", "stream": true})",
                 [](size_t received) { return received < 3000; });
  });
  for (int i = 0; i < 200 && server_->open_requests() < 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server_->open_requests(), 1);
  // While draining, new work is refused and /health says so; the open stream ends (here: its
  // client hangs up) and drain returns with nothing open.
  std::thread drain([this] { EXPECT_EQ(server_->drain(10s), 0); });
  for (int i = 0; i < 100 && client_->Get("/health")->status != 503; ++i) std::this_thread::sleep_for(10ms);
  expect_error(post("/v1/completions", R"({"prompt": "hi"})"), 503);
  EXPECT_EQ(client_->Get("/ping")->status, 503);
  stream.join();
  drain.join();
  EXPECT_EQ(server_->open_requests(), 0);
}

}  // namespace
}  // namespace dsv4::server
