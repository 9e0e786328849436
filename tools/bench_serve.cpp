// `dsv4 bench serve`: a load generator for any OpenAI-compatible server, with the flags and the
// report of vLLM's `vllm bench serve`. Random prompts (random token ids decoded to text, about
// --random-input-len tokens each) go out as streamed completions or chat completions, all at once
// or as Poisson arrivals, at most --max-concurrency at a time. Per request it measures the time to
// the first content chunk (TTFT), the gaps between content chunks (ITL), TPOT and the end-to-end
// latency; token counts come from the server's usage. Failed requests are counted and listed, and
// make the command fail after its report.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/json_file.h"
#include "tools/number_checks.h"
#include "tools/serving_report.h"

namespace dsv4::tools {

namespace {

using Clock = std::chrono::steady_clock;

struct ServeBenchOptions {
  std::string base_url;  // empty: http://HOST:PORT
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint = "/v1/completions";
  std::string model;  // empty: the first model the server lists
  std::string api_key;
  std::string dataset_name = "random";
  std::string dataset_path;                  // sharegpt: the conversations' JSON file
  std::optional<int64_t> sharegpt_output_len;  // sharegpt: every output this long (else the answer's)
  std::string tokenizer_file = DSV4_TOKENIZER_DIR "/tokenizer.json";
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t prefix_len = 0;
  int64_t output_len = 128;
  double range_ratio = 0.0;
  std::vector<int64_t> max_concurrency;  // empty: no limit; several: one run each
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;  // gamma arrivals' shape: 1 Poisson, < 1 burstier, > 1 steadier
  uint64_t seed = 0;
  std::string served_model_name;  // the name in the requests, if not --model's
  std::string backend = "vllm";
  std::string label;                                          // empty: the endpoint type
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  std::vector<double> metric_percentiles = {99};
  std::vector<std::pair<std::string, double>> goodput;        // metric -> SLO in ms
  bool ignore_eos = false;
  bool save_result = false;
  std::string result_dir;
  std::string result_filename;
};

// Where requests go: the scheme, host and port httplib connects to, and the path to POST to.
struct Target {
  std::string scheme_host_port;
  std::string path;
  bool chat = false;
  std::string api_key;
};

Target target_of(const ServeBenchOptions& o) {
  Target t;
  std::string url = o.base_url.empty() ? "http://" + o.host + ":" + std::to_string(o.port) : o.base_url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos || (url.substr(0, scheme_end) != "http" && url.substr(0, scheme_end) != "https"))
    throw UsageError("--base-url " + o.base_url + ": expected http://HOST[:PORT][/PATH] or https://...");
  const size_t path_start = url.find('/', scheme_end + 3);
  t.scheme_host_port = url.substr(0, path_start);
  const std::string prefix = path_start == std::string::npos ? "" : url.substr(path_start);
  if (o.endpoint.empty() || o.endpoint.front() != '/')
    throw UsageError("--endpoint " + o.endpoint + ": expected a path such as /v1/completions");
  t.path = prefix + o.endpoint;
  const auto ends_with = [&](std::string_view tail) { return o.endpoint.ends_with(tail); };
  if (ends_with("/chat/completions")) {
    t.chat = true;
  } else if (!ends_with("/completions")) {
    throw UsageError("--endpoint " + o.endpoint +
                     ": expected a completions or chat completions path (/v1/completions, /v1/chat/completions)");
  }
  t.api_key = o.api_key;
  return t;
}

httplib::Headers request_headers(const Target& t) {
  httplib::Headers h{{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!t.api_key.empty()) h.emplace("Authorization", "Bearer " + t.api_key);
  return h;
}

std::unique_ptr<httplib::Client> connect(const Target& t) {
  auto client = std::make_unique<httplib::Client>(t.scheme_host_port);
  if (!client->is_valid()) throw UsageError("--base-url: httplib cannot use " + t.scheme_host_port);
  client->set_connection_timeout(std::chrono::seconds(10));
  client->set_read_timeout(std::chrono::hours(1));  // between reads: a long prefill sends nothing
  // A connection per request: with keep-alive, dsv4 serve's early 401 (sent before the body is
  // read) made about one request in fifteen come back as a 400 (httplib 0.11 both ends). On
  // 127.0.0.1 a connect costs well under a millisecond of TTFT; over TLS it is a handshake.
  client->set_keep_alive(false);
  return client;
}

// The message of an OpenAI error body, or the start of the body when it is not one.
std::string error_message(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const nlohmann::json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return body.substr(0, 200);
}

// The first model the server lists at /v1/models.
std::string first_served_model(const Target& t) {
  const auto client = connect(t);
  const std::string prefix = t.path.substr(0, t.path.rfind("/v1/"));
  httplib::Headers headers;
  if (!t.api_key.empty()) headers.emplace("Authorization", "Bearer " + t.api_key);
  const httplib::Result r = client->Get(prefix + "/v1/models", headers);
  const std::string url = t.scheme_host_port + prefix + "/v1/models";
  if (!r) throw IoError(url + ": " + httplib::to_string(r.error()) + " error (is the server running? or give --model)");
  if (r->status != 200) throw IoError(url + ": HTTP " + std::to_string(r->status) + ": " + error_message(r->body));
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string())
    throw IoError(url + " lists no model; give --model");
  return j["data"][0]["id"].get<std::string>();
}

struct Prompt {
  std::string text;
  int64_t tokens = 0;      // by the local tokenizer
  int64_t max_tokens = 0;  // the output length asked for
};

int64_t random_length(std::mt19937_64& rng, int64_t length, double range_ratio) {
  const auto lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(length) * (1.0 - range_ratio))));
  const auto hi = std::max<int64_t>(lo, static_cast<int64_t>(std::ceil(static_cast<double>(length) * (1.0 + range_ratio))));
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// The ids a random prompt draws from: every token but the added (special) ones, whose text the
// server would read back as that token.
std::vector<int32_t> ordinary_token_ids(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    std::string bytes;
    try {
      bytes = std::string(tokenizer.token_bytes(id));
    } catch (const UsageError&) {
      continue;  // an id that names no token
    }
    if (tokenizer.token_id(bytes) != id) ids.push_back(id);
  }
  if (ids.empty()) throw UsageError("--tokenizer: the vocabulary has no ordinary tokens");
  return ids;
}

// vLLM's random dataset: random ids decoded to text; since decoding and encoding again merges or
// splits tokens, the ids are cut or topped up until the text encodes to the wanted length (or
// close to it after a few rounds). With --random-prefix-len every prompt starts with the same
// random text of that many tokens (vLLM's shared prefix, what prefix caching serves).
std::vector<Prompt> random_prompts(const Tokenizer& tokenizer, const ServeBenchOptions& o) {
  const std::vector<int32_t> vocabulary = ordinary_token_ids(tokenizer);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<size_t> pick(0, vocabulary.size() - 1);
  const auto random_text = [&](size_t target) {
    std::vector<int32_t> ids;
    for (int round = 0; round < 8; ++round) {
      while (ids.size() < target) ids.push_back(vocabulary[pick(rng)]);
      std::vector<int32_t> encoded = tokenizer.encode(tokenizer.decode(ids));
      if (encoded.size() == target) break;
      if (encoded.size() > target) encoded.resize(target);
      ids = std::move(encoded);
    }
    return tokenizer.decode(ids);
  };
  const std::string prefix = o.prefix_len > 0 ? random_text(static_cast<size_t>(o.prefix_len)) : "";
  std::vector<Prompt> prompts;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    const auto target = static_cast<size_t>(random_length(rng, o.input_len, o.range_ratio));
    Prompt p;
    p.max_tokens = random_length(rng, o.output_len, o.range_ratio);
    p.text = prefix + random_text(target);
    p.tokens = static_cast<int64_t>(tokenizer.encode(p.text).size());
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// vLLM's ShareGPT dataset: conversations [{"conversations": [{"from", "value"}, ...]}, ...] in a
// shuffled order (the seed's; not Python's order), each one's first turn the prompt and its second
// turn's token count the output length (or --sharegpt-output-len), keeping those vLLM keeps:
// prompt and output of at least 4 tokens, and without a fixed output length a prompt of at most
// 1,024 and both of at most 2,048. Fewer such conversations than prompts are cycled through.
std::vector<Prompt> sharegpt_prompts(const Tokenizer& tokenizer, const ServeBenchOptions& o) {
  std::ifstream in(o.dataset_path);
  if (!in) throw IoError(o.dataset_path + ": cannot open the dataset");
  nlohmann::json data;
  try {
    data = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw FormatError(o.dataset_path + ": not JSON (" + e.what() + ")");
  }
  if (!data.is_array()) throw FormatError(o.dataset_path + ": expected a list of conversations");
  std::vector<std::pair<std::string, std::string>> turns;
  for (const nlohmann::json& entry : data) {
    if (!entry.is_object() || !entry.contains("conversations") || !entry["conversations"].is_array()) continue;
    const nlohmann::json& conversation = entry["conversations"];
    if (conversation.size() < 2 || !conversation[0].contains("value") || !conversation[1].contains("value") ||
        !conversation[0]["value"].is_string() || !conversation[1]["value"].is_string())
      continue;
    turns.emplace_back(conversation[0]["value"].get<std::string>(), conversation[1]["value"].get<std::string>());
  }
  std::mt19937_64 rng(o.seed);
  std::shuffle(turns.begin(), turns.end(), rng);
  std::vector<Prompt> kept;
  for (const auto& [prompt, answer] : turns) {
    if (static_cast<int64_t>(kept.size()) == o.num_prompts) break;
    Prompt p;
    p.text = prompt;
    p.tokens = static_cast<int64_t>(tokenizer.encode(prompt).size());
    p.max_tokens = o.sharegpt_output_len.value_or(static_cast<int64_t>(tokenizer.encode(answer).size()));
    if (p.tokens < 4 || p.max_tokens < 4) continue;
    if (!o.sharegpt_output_len && (p.tokens > 1024 || p.tokens + p.max_tokens > 2048)) continue;
    kept.push_back(std::move(p));
  }
  if (kept.empty())
    throw UsageError(o.dataset_path + ": no conversation has a prompt and an answer of 4 tokens or more (within 1,024 / "
                     "2,048 tokens)");
  std::vector<Prompt> prompts;
  for (int64_t i = 0; i < o.num_prompts; ++i) prompts.push_back(kept[static_cast<size_t>(i) % kept.size()]);
  return prompts;
}

std::string request_body(const Target& t, const std::string& model, const Prompt& p, bool ignore_eos) {
  nlohmann::json body{{"model", model},
                      {"temperature", 0.0},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}};
  if (t.chat) {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", p.text}}});
    body["max_completion_tokens"] = p.max_tokens;
  } else {
    body["prompt"] = p.text;
    body["max_tokens"] = p.max_tokens;
  }
  if (ignore_eos) body["ignore_eos"] = true;
  return body.dump();
}

// What one request did. Times in seconds; start_time from the benchmark's start.
struct RequestOutcome {
  bool success = false;
  std::string error;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double start_time = 0;
  double ttft = 0;
  double latency = 0;
  std::vector<double> itl;
  std::string generated_text;
};

// Reads a server-sent event stream of completion chunks as it arrives, timing each chunk that
// carries text (content, or a chat reasoning_content).
class ChunkTimer {
 public:
  ChunkTimer(RequestOutcome& out, Clock::time_point start, bool chat) : out_(out), start_(start), chat_(chat) {}

  void feed(const char* data, size_t size) {
    const Clock::time_point now = Clock::now();
    pending_.append(data, size);
    size_t line_end;
    while ((line_end = pending_.find('\n')) != std::string::npos) {
      std::string line = pending_.substr(0, line_end);
      pending_.erase(0, line_end + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.starts_with("data:")) continue;
      const size_t payload = line.find_first_not_of(' ', 5);
      event(payload == std::string::npos ? std::string() : line.substr(payload), now);
    }
  }

  bool done() const { return done_; }
  bool saw_usage() const { return saw_usage_; }
  const std::string& stream_error() const { return error_; }

 private:
  void event(const std::string& payload, Clock::time_point now) {
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
    if (!j.is_object()) {
      if (error_.empty()) error_ = "not JSON in the stream: " + payload.substr(0, 200);
      return;
    }
    if (j.contains("error")) {
      if (error_.empty()) error_ = "error event: " + error_message(payload);
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const nlohmann::json& u = j["usage"];
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer() && u.contains("completion_tokens") &&
          u["completion_tokens"].is_number_integer()) {
        out_.prompt_tokens = u["prompt_tokens"].get<int64_t>();
        out_.output_tokens = u["completion_tokens"].get<int64_t>();
        saw_usage_ = true;
      }
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const nlohmann::json& choice = j["choices"][0];
    std::string text;
    const auto append = [&text](const nlohmann::json& from, const char* key) {
      if (from.is_object() && from.contains(key) && from[key].is_string()) text += from[key].get<std::string>();
    };
    if (chat_) {
      if (choice.contains("delta")) {
        append(choice["delta"], "reasoning_content");
        append(choice["delta"], "content");
      }
    } else {
      append(choice, "text");
    }
    if (text.empty()) return;
    const double since_start = std::chrono::duration<double>(now - start_).count();
    if (!first_) {
      out_.itl.push_back(std::chrono::duration<double>(now - last_).count());
    } else {
      out_.ttft = since_start;
      first_ = false;
    }
    last_ = now;
    out_.generated_text += text;
  }

  RequestOutcome& out_;
  Clock::time_point start_, last_;
  bool chat_;
  bool first_ = true;
  bool done_ = false;
  bool saw_usage_ = false;
  std::string error_;
  std::string pending_;
};

RequestOutcome send_request(httplib::Client& client, const Target& t, const std::string& body, const Prompt& prompt,
                            const Tokenizer& tokenizer, Clock::time_point bench_start) {
  RequestOutcome out;
  const Clock::time_point start = Clock::now();
  out.start_time = std::chrono::duration<double>(start - bench_start).count();
  int status = 0;
  std::string error_body;
  ChunkTimer timer(out, start, t.chat);
  httplib::Request req;
  req.method = "POST";
  req.path = t.path;
  req.headers = request_headers(t);
  req.body = body;
  req.response_handler = [&status](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (status == 200) {
      timer.feed(data, size);
    } else if (error_body.size() < 4096) {
      error_body.append(data, size);
    }
    return true;
  };
  const httplib::Result result = client.send(req);
  out.latency = std::chrono::duration<double>(Clock::now() - start).count();
  if (!result) {
    out.error = t.scheme_host_port + t.path + ": " + httplib::to_string(result.error()) + " error" +
                (result.error() == httplib::Error::Connection ? " (nothing answers at this address?)" : "");
  } else if (status != 200) {
    out.error = "HTTP " + std::to_string(status) + ": " + error_message(error_body);
  } else if (!timer.stream_error().empty()) {
    out.error = timer.stream_error();
  } else if (!timer.done()) {
    out.error = "the stream ended without data: [DONE]";
  } else if (out.generated_text.empty()) {
    out.error = "the stream carried no text";
  } else {
    out.success = true;
    if (!timer.saw_usage()) {  // a server that ignores stream_options: count locally
      out.prompt_tokens = prompt.tokens;
      out.output_tokens = static_cast<int64_t>(tokenizer.encode(out.generated_text).size());
    }
  }
  if (!out.success) {
    out.ttft = 0;
    out.itl.clear();
    out.output_tokens = 0;
    out.prompt_tokens = prompt.tokens;
  }
  return out;
}

// Arrival offsets in seconds: all at 0 for an infinite rate, else gaps drawn from a gamma
// distribution of shape `burstiness` and mean 1 / rate, as vLLM draws them (shape 1: a Poisson
// process).
std::vector<double> arrival_times(int64_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> at(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return at;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0;
  for (double& a : at) {
    a = t;
    t += gap(rng);
  }
  return at;
}

// One run at one concurrency (0: none): every prompt sent, every outcome in prompt order, and
// the seconds from the first send to the last answer.
struct RunResult {
  std::vector<RequestOutcome> outcomes;
  double duration = 0;
};

RunResult run_requests(const Target& t, const std::string& model, const std::vector<Prompt>& prompts,
                       const ServeBenchOptions& o, int64_t concurrency, const Tokenizer& tokenizer) {
  const int64_t n = static_cast<int64_t>(prompts.size());
  const std::vector<double> arrivals = arrival_times(n, o.request_rate, o.burstiness, o.seed);
  std::vector<std::string> bodies;
  for (const Prompt& p : prompts) bodies.push_back(request_body(t, model, p, o.ignore_eos));
  RunResult run;
  run.outcomes.resize(prompts.size());
  std::atomic<int64_t> next{0};
  const int64_t workers = concurrency > 0 ? std::min(concurrency, n) : n;
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int64_t w = 0; w < workers; ++w) clients.push_back(connect(t));
  const Clock::time_point start = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (int64_t w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        for (int64_t i = next++; i < n; i = next++) {
          const auto at = static_cast<size_t>(i);
          const std::chrono::duration<double> arrival(arrivals[at]);
          std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(arrival));
          try {
            run.outcomes[at] = send_request(*clients[static_cast<size_t>(w)], t, bodies[at], prompts[at], tokenizer, start);
          } catch (const std::exception& e) {  // a failed request, never the whole run
            run.outcomes[at] = RequestOutcome{};
            run.outcomes[at].error = e.what();
            run.outcomes[at].prompt_tokens = prompts[at].tokens;
          }
        }
      });
    }
  }
  run.duration = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

// vLLM's rate in a file name and the JSON: "inf", or the number.
std::string rate_word(double rate) {
  if (std::isinf(rate)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, rate == std::floor(rate) ? "%.1f" : "%g", rate);
  return buf;
}

std::string now_stamp(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &local);
  return buf;
}

// A request's time per output token after the first, in seconds (none for fewer than two tokens).
std::optional<double> tpot_seconds(const RequestOutcome& r) {
  if (r.output_tokens <= 1) return std::nullopt;
  return (r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1);
}

// Prints vLLM's result block for one run and returns its JSON (vLLM's keys).
nlohmann::json report(const RunResult& run, const ServeBenchOptions& o, const Target& t, const std::string& model,
                      int64_t concurrency) {
  int64_t completed = 0, failed = 0, total_input = 0, total_output = 0;
  std::vector<double> ttfts, tpots, itls, e2els;
  nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                 ttft_list = nlohmann::json::array(), itl_lists = nlohmann::json::array(),
                 latencies = nlohmann::json::array(), start_times = nlohmann::json::array(),
                 texts = nlohmann::json::array(), errors = nlohmann::json::array();
  for (const RequestOutcome& r : run.outcomes) {
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(r.output_tokens);
    ttft_list.push_back(r.ttft);
    itl_lists.push_back(r.itl);
    latencies.push_back(r.latency);
    start_times.push_back(r.start_time);
    texts.push_back(r.generated_text);
    errors.push_back(r.error);
    if (!r.success) {
      ++failed;
      continue;
    }
    ++completed;
    total_input += r.prompt_tokens;
    total_output += r.output_tokens;
    ttfts.push_back(r.ttft);
    if (const std::optional<double> tpot = tpot_seconds(r)) tpots.push_back(*tpot);
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    e2els.push_back(r.latency);
  }
  if (failed > 0) {
    std::printf("Failed requests during benchmark run detected (capping to 10):\n");
    int64_t shown = 0;
    for (const RequestOutcome& r : run.outcomes)
      if (!r.success && shown < 10) std::printf("Error %lld: %s\n", static_cast<long long>(shown++), r.error.c_str());
  }
  const double duration = run.duration;
  struct Metric {
    const char* key;
    const char* header;
    const char* name;
    LatencySummary summary;
  };
  const std::vector<Metric> metrics = {
      {"ttft", "Time to First Token", "TTFT", summarise_ms(ttfts, o.metric_percentiles)},
      {"tpot", "Time per Output Token (excl. 1st token)", "TPOT", summarise_ms(tpots, o.metric_percentiles)},
      {"itl", "Inter-token Latency", "ITL", summarise_ms(itls, o.metric_percentiles)},
      {"e2el", "End-to-end Latency", "E2EL", summarise_ms(e2els, o.metric_percentiles)}};
  const auto selected = [&o](const char* key) {
    return std::find(o.percentile_metrics.begin(), o.percentile_metrics.end(), key) != o.percentile_metrics.end();
  };
  // Goodput: the completed requests that meet every service-level objective asked for.
  int64_t good = 0;
  for (const RequestOutcome& r : run.outcomes) {
    if (!r.success || o.goodput.empty()) continue;
    bool meets = true;
    for (const auto& [metric, slo_ms] : o.goodput) {
      const double seconds = metric == "ttft" ? r.ttft : metric == "tpot" ? tpot_seconds(r).value_or(0.0) : r.latency;
      meets = meets && seconds * 1e3 <= slo_ms;
    }
    good += meets;
  }
  std::printf("%s\n", centred_title(" Serving Benchmark Result ", '=').c_str());
  print_result_count("Successful requests:", completed);
  print_result_count("Failed requests:", failed);
  if (concurrency > 0) print_result_count("Maximum request concurrency:", concurrency);
  if (!std::isinf(o.request_rate)) print_result_row("Request rate configured (RPS):", o.request_rate);
  print_result_row("Benchmark duration (s):", duration);
  print_result_count("Total input tokens:", total_input);
  print_result_count("Total generated tokens:", total_output);
  print_result_row("Request throughput (req/s):", static_cast<double>(completed) / duration);
  if (!o.goodput.empty()) print_result_row("Request goodput (req/s):", static_cast<double>(good) / duration);
  print_result_row("Output token throughput (tok/s):", static_cast<double>(total_output) / duration);
  print_result_row("Total Token throughput (tok/s):", static_cast<double>(total_input + total_output) / duration);
  for (const Metric& m : metrics)
    if (selected(m.key)) print_latency_section(m.header, m.name, m.summary);
  std::printf("%s\n", std::string(50, '=').c_str());
  std::fflush(stdout);

  nlohmann::json j{{"date", now_stamp("%Y%m%d-%H%M%S")},
                   {"endpoint_type", t.chat ? "openai-chat" : "openai"},
                   {"label", o.label.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.label)},
                   {"model_id", model},
                   {"tokenizer_id", o.tokenizer_file},
                   {"num_prompts", o.num_prompts},
                   {"request_rate", std::isinf(o.request_rate) ? nlohmann::json("inf") : nlohmann::json(o.request_rate)},
                   {"burstiness", o.burstiness},
                   {"max_concurrency", concurrency > 0 ? nlohmann::json(concurrency) : nlohmann::json(nullptr)},
                   {"duration", duration},
                   {"completed", completed},
                   {"failed", failed},
                   {"total_input_tokens", total_input},
                   {"total_output_tokens", total_output},
                   {"request_throughput", static_cast<double>(completed) / duration},
                   {"request_goodput", o.goodput.empty() ? nlohmann::json(nullptr)
                                                         : nlohmann::json(static_cast<double>(good) / duration)},
                   {"output_throughput", static_cast<double>(total_output) / duration},
                   {"total_token_throughput", static_cast<double>(total_input + total_output) / duration},
                   {"input_lens", input_lens},
                   {"output_lens", output_lens},
                   {"ttfts", ttft_list},
                   {"itls", itl_lists},
                   {"latencies", latencies},
                   {"start_times", start_times},
                   {"generated_texts", texts},
                   {"errors", errors}};
  for (const Metric& m : metrics) {
    if (!selected(m.key)) continue;
    const std::string key = m.key;
    j["mean_" + key + "_ms"] = m.summary.mean_ms;
    j["median_" + key + "_ms"] = m.summary.median_ms;
    j["std_" + key + "_ms"] = m.summary.std_ms;
    for (const auto& [p, value] : m.summary.percentiles_ms) j["p" + percentile_word(p) + "_" + key + "_ms"] = value;
  }
  return j;
}

// vLLM's file name, {endpoint type}-{rate}qps[-concurrency{N}]-{model}-{date}.json, or
// --result-filename (with -concurrency{N} before its extension when sweeping).
std::filesystem::path result_path(const ServeBenchOptions& o, const nlohmann::json& result, int64_t concurrency) {
  const std::string concurrency_part = concurrency > 0 ? "-concurrency" + std::to_string(concurrency) : "";
  std::string name;
  if (o.result_filename.empty()) {
    const std::string model = result["model_id"].get<std::string>();
    name = (o.label.empty() ? result["endpoint_type"].get<std::string>() : o.label) + "-" + rate_word(o.request_rate) +
           "qps" + concurrency_part + "-" +
           model.substr(model.rfind('/') + 1) + "-" + result["date"].get<std::string>() + ".json";
  } else if (o.max_concurrency.size() > 1) {
    const std::filesystem::path given(o.result_filename);
    name = given.stem().string() + concurrency_part + given.extension().string();
  } else {
    name = o.result_filename;
  }
  return o.result_dir.empty() ? std::filesystem::path(name) : std::filesystem::path(o.result_dir) / name;
}

void run_bench_serve(const ServeBenchOptions& o) {
  if (o.dataset_name == "sharegpt" && o.dataset_path.empty())
    throw UsageError("--dataset-name sharegpt needs --dataset-path (ShareGPT's JSON file)");

  const Target target = target_of(o);
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer_file);
  const std::string model = !o.served_model_name.empty() ? o.served_model_name
                            : o.model.empty()                ? first_served_model(target)
                                                             : o.model;
  const bool sharegpt = o.dataset_name == "sharegpt";
  const std::vector<Prompt> prompts = sharegpt ? sharegpt_prompts(tokenizer, o) : random_prompts(tokenizer, o);
  if (sharegpt) {
    int64_t in = 0, out = 0;
    for (const Prompt& p : prompts) in += p.tokens, out += p.max_tokens;
    std::printf("bench serve: %lld ShareGPT prompts from %s (%lld prompt tokens, %lld output tokens asked in all), to "
                "%s%s, model %s\n",
                static_cast<long long>(o.num_prompts), o.dataset_path.c_str(), static_cast<long long>(in),
                static_cast<long long>(out), target.scheme_host_port.c_str(), target.path.c_str(), model.c_str());
  } else {
    std::printf("bench serve: %lld random prompts of about %lld tokens (%lld of them shared, range ratio %.2f), up to "
                "%lld output tokens, to %s%s, model %s\n",
                static_cast<long long>(o.num_prompts), static_cast<long long>(o.prefix_len + o.input_len),
                static_cast<long long>(o.prefix_len), o.range_ratio, static_cast<long long>(o.output_len),
                target.scheme_host_port.c_str(), target.path.c_str(), model.c_str());
  }
  const std::vector<int64_t> concurrencies = o.max_concurrency.empty() ? std::vector<int64_t>{0} : o.max_concurrency;
  int64_t failed = 0, sent = 0;
  std::string first_error;
  for (int64_t concurrency : concurrencies) {
    std::printf("Traffic request rate: %s\n", rate_word(o.request_rate).c_str());
    std::printf("Burstiness factor: %s (%s)\n", nlohmann::json(o.burstiness).dump().c_str(),
                o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
    std::printf("Maximum request concurrency: %s\n", concurrency > 0 ? std::to_string(concurrency).c_str() : "None");
    std::fflush(stdout);
    const RunResult run = run_requests(target, model, prompts, o, concurrency, tokenizer);
    // The result's model_id: --model, also when --served-model-name names the requests' model.
    const nlohmann::json result = report(run, o, target, o.model.empty() ? model : o.model, concurrency);
    for (const RequestOutcome& r : run.outcomes) {
      ++sent;
      if (r.success) continue;
      ++failed;
      if (first_error.empty()) first_error = r.error;
    }
    if (o.save_result) {
      const std::filesystem::path path = result_path(o, result, concurrency);
      if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
      write_json_file(path.string(), result, -1, "result");
      std::printf("Results saved to %s\n", path.string().c_str());
    }
  }
  if (failed > 0)
    throw Error("bench serve: " + std::to_string(failed) + " of " + std::to_string(sent) + " requests failed; the first: " +
                first_error);
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
  auto o = std::make_shared<ServeBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "Load an OpenAI-compatible server with random prompts (vLLM's `bench serve` flags and report): streamed "
      "requests, TTFT / TPOT / ITL / E2EL mean, median and p99, request and token throughput");
  cmd->add_option("--base-url", o->base_url, "Server URL, e.g. http://127.0.0.1:8000 (default: http://HOST:PORT)");
  cmd->add_option("--host", o->host, "Server host when no --base-url")->default_str("127.0.0.1");
  cmd->add_option("--port", o->port, "Server port when no --base-url")->check(number_from_to(1, 65535))->default_str("8000");
  CLI::Option* endpoint =
      cmd->add_option("--endpoint", o->endpoint, "Path to POST to: /v1/completions or /v1/chat/completions")
          ->default_str("/v1/completions (/v1/chat/completions with --backend openai-chat)");
  cmd->add_option("--backend", o->backend,
                  "vLLM's request formats: openai-chat posts chat completions; vllm and openai follow --endpoint")
      ->check(CLI::IsMember({"vllm", "openai", "openai-chat"}))
      ->default_str("vllm");
  cmd->add_option("--model", o->model, "Model name in the requests (default: the first one /v1/models lists)");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "Model name in the requests when it differs from --model (vLLM's: --model is then the result's model_id)");
  cmd->add_option("--api-key", o->api_key, "Sent as \"Authorization: Bearer KEY\"")->envname("OPENAI_API_KEY");
  cmd->add_option("--dataset-name", o->dataset_name,
                  "Prompt source: random (random tokens, the --random-* flags) or sharegpt (--dataset-path)")
      ->check(CLI::IsMember({"random", "sharegpt"}))
      ->default_str("random");
  cmd->add_option("--dataset-path", o->dataset_path, "sharegpt: the conversations' JSON (e.g. ShareGPT_V3_unfiltered_cleaned_split.json)");
  cmd->add_option_function<int64_t>(
         "--sharegpt-output-len", [o](int64_t n) { o->sharegpt_output_len = n; },
         "sharegpt: ask every request for this many tokens (default: as many as the conversation's answer has)")
      ->check(positive_number());
  cmd->add_option("--tokenizer", o->tokenizer_file, "tokenizer.json the random prompts are made with")
      ->default_str(o->tokenizer_file);
  cmd->add_option("--num-prompts", o->num_prompts, "Requests per run")->check(positive_number())->default_str("1000");
  cmd->add_option("--random-input-len", o->input_len, "Prompt tokens")->check(positive_number())->default_str("1024");
  cmd->add_option("--random-prefix-len", o->prefix_len, "Tokens of one random text every prompt starts with, before its own")
      ->check(non_negative_number())
      ->default_str("0");
  cmd->add_option("--random-output-len", o->output_len, "Output tokens asked for (max_tokens)")
      ->check(positive_number())
      ->default_str("128");
  cmd->add_option("--random-range-ratio", o->range_ratio, "Lengths drawn uniformly from [len * (1 - r), len * (1 + r)]")
      ->check(number_from_to(0.0, 1.0))
      ->default_str("0");
  cmd->add_option("--max-concurrency", o->max_concurrency,
                  "Requests in flight at most (default: no limit); several, comma-separated, make one run each")
      ->delimiter(',')
      ->check(positive_number());
  cmd->add_option("--request-rate", o->request_rate, "Requests per second, Poisson arrivals (inf: all at once)")
      ->check(positive_number())
      ->default_str("inf");
  cmd->add_option("--burstiness", o->burstiness,
                  "With --request-rate: the gaps' gamma shape (1: Poisson; below 1 burstier, above steadier), as vLLM's")
      ->check(positive_number())
      ->default_str("1");
  cmd->add_option("--percentile-metrics", o->percentile_metrics,
                  "Metrics whose summaries are printed and saved, comma-separated: ttft, tpot, itl, e2el")
      ->delimiter(',')
      ->check(CLI::IsMember({"ttft", "tpot", "itl", "e2el"}))
      ->default_str("ttft,tpot,itl,e2el");
  cmd->add_option("--metric-percentiles", o->metric_percentiles,
                  "Percentiles of those metrics, comma-separated (e.g. 50,90,99): rows P50 TTFT (ms) and keys p50_ttft_ms")
      ->delimiter(',')
      ->check(number_from_to(0.0, 100.0))
      ->default_str("99");
  cmd->add_option_function<std::vector<std::string>>(
         "--goodput",
         [o](const std::vector<std::string>& slos) {
           for (const std::string& slo : slos) {
             const size_t colon = slo.find(':');
             const std::string metric = slo.substr(0, colon);
             if (colon == std::string::npos || (metric != "ttft" && metric != "tpot" && metric != "e2el"))
               throw CLI::ValidationError("--goodput", slo + ": expected ttft:MS, tpot:MS or e2el:MS");
             double ms = 0;
             try {
               size_t used = 0;
               ms = std::stod(slo.substr(colon + 1), &used);
               if (used != slo.size() - colon - 1) throw std::invalid_argument("trailing");
             } catch (const std::exception&) {
               throw CLI::ValidationError("--goodput", slo + ": the objective must be a number of milliseconds");
             }
             if (!(ms > 0)) throw CLI::ValidationError("--goodput", slo + ": the objective must be positive");
             o->goodput.emplace_back(metric, ms);
           }
         },
         "Service-level objectives in ms (e.g. ttft:500 tpot:50): requests meeting all of them give the goodput")
      ->expected(1, -1);
  cmd->add_option("--label", o->label, "The result's label, and its file name's start instead of the endpoint type");
  cmd->add_flag("--disable-tqdm")->description("Accepted for vLLM's command lines; this benchmark draws no progress bar");
  cmd->add_option("--seed", o->seed, "Seed of the prompts and the arrivals")->default_str("0");
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "Ask the server to ignore end-of-sequence (ignore_eos), so outputs are full length");
  cmd->add_flag("--save-result", o->save_result, "Write the results as JSON (vLLM's keys)");
  cmd->add_option("--result-dir", o->result_dir, "Folder of the JSON (default: the current one)");
  cmd->add_option("--result-filename", o->result_filename,
                  "JSON file name (default: ENDPOINT_TYPE-RATEqps[-concurrencyN]-MODEL-DATE.json)");
  cmd->callback([o, endpoint] {
    const bool chat_backend = o->backend == "openai-chat";
    if (chat_backend && endpoint->count() == 0) o->endpoint = "/v1/chat/completions";
    if (chat_backend && !o->endpoint.ends_with("/chat/completions"))
      throw UsageError("--backend openai-chat posts chat completions, but --endpoint is " + o->endpoint);
    run_bench_serve(*o);
  });
}

}  // namespace dsv4::tools
