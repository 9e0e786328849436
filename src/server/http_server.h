// OpenAiServer: the HTTP face of the engine (cpp-httplib). Routes: POST /v1/chat/completions and
// /v1/completions (JSON, or server-sent events with "stream": true), GET /v1/models, GET /health
// and GET or POST /ping (200 with no body; 503 until an engine is set, and while draining), GET
// /version ({"version": dsv4's}), GET /metrics (Prometheus text), POST /tokenize and /detokenize.
// Every refusal is an OpenAI error object with its status (api_error.h), and a bad request never
// takes the server down.
//
// Threads: the HTTP server runs on a pool of its own; each request is handled on one pool thread,
// which for a stream stays with it until the last event. A streamed request whose client goes
// away is cancelled at the engine. drain() refuses new generation requests and waits for the open
// ones, for a clean stop on SIGTERM.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/openai_request.h"
#include "server/serving_engine.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (start() returns it)
  std::string api_key;                 // empty: none; else "Authorization: Bearer KEY" on every
                                       // route but /health and /ping (401 without it)
  std::string served_model_name = "dsv4";
  size_t max_body_bytes = 32u << 20;   // 413 beyond
  int64_t max_open_requests = 256;     // generation requests in flight; 429 beyond
  // What requests that leave a sampling field out get (the model's generation_config.json with
  // --generation-config auto).
  SamplingDefaults sampling_defaults;
  // Called with one line per request answered (`ADDR:PORT "METHOD PATH HTTP/1.1" STATUS`, as
  // uvicorn's access log in front of vLLM), from the server's threads; empty: no access log.
  std::function<void(const std::string&)> access_log;
};

class OpenAiServer {
 public:
  // The tokenizer renders chat prompts, tokenizes text prompts and spells logprob tokens.
  OpenAiServer(ServerOptions options, std::shared_ptr<const Tokenizer> tokenizer);
  ~OpenAiServer();  // stops serving
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds and serves on a thread of its own. Returns the port. Throws IoError if it cannot bind.
  int start();
  // From now on requests go to `engine` (which must outlive the server) and /health is 200.
  void set_engine(ServingEngine& engine);
  // Refuses new generation requests (503) and waits up to `timeout` for the open ones to finish.
  // Returns how many are still open.
  int64_t drain(std::chrono::milliseconds timeout);
  // Stops accepting connections and joins the server thread; open streams are cut.
  void stop();

  int64_t open_requests() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
