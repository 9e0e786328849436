// What the server needs of an engine, as an interface: submit a request and read its chunks,
// cancel it, read the engine's stats. The real dsv4::Engine (runtime/engine.h) stands behind it
// through serve_engine(); tests put a scripted engine there, since RequestHandle can only be
// made by the Engine itself. The request and chunk types are the engine's own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/engine.h"

namespace dsv4::server {

// One request's output. Destroying it before the last chunk cancels the request.
class GenerationStream {
 public:
  virtual ~GenerationStream() = default;
  // The next chunk if one comes within `timeout`, else none. The last one carries `finish`.
  virtual std::optional<OutputChunk> next_for(std::chrono::milliseconds timeout) = 0;
  virtual void cancel() = 0;
};

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;
  // Throws UsageError (a message for the client) when the engine refuses the request.
  virtual std::unique_ptr<GenerationStream> submit(GenerateRequest request) = 0;
  virtual EngineStats stats() const = 0;
  virtual int64_t max_model_len() const = 0;
  // Why the engine can no longer serve (Engine::fault); none while it can.
  virtual std::optional<std::string> fault() const { return std::nullopt; }
};

// The real engine behind the interface; `engine` must outlive the result.
std::unique_ptr<ServingEngine> serve_engine(Engine& engine);

}  // namespace dsv4::server
