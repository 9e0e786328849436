// serve_engine(): dsv4::Engine and its RequestHandle behind the server's interface.
#include "server/serving_engine.h"

namespace dsv4::server {
namespace {

class HandleStream final : public GenerationStream {
 public:
  explicit HandleStream(RequestHandle handle) : handle_(std::move(handle)) {}
  std::optional<OutputChunk> next_for(std::chrono::milliseconds timeout) override {
    return handle_.next_for(timeout);
  }
  void cancel() override { handle_.cancel(); }

 private:
  RequestHandle handle_;
};

class EngineAdapter final : public ServingEngine {
 public:
  explicit EngineAdapter(Engine& engine) : engine_(engine) {}
  std::unique_ptr<GenerationStream> submit(GenerateRequest request) override {
    return std::make_unique<HandleStream>(engine_.submit(std::move(request)));
  }
  EngineStats stats() const override { return engine_.stats(); }
  int64_t max_model_len() const override { return engine_.config().max_model_len; }
  std::optional<std::string> fault() const override { return engine_.fault(); }

 private:
  Engine& engine_;
};

}  // namespace

std::unique_ptr<ServingEngine> serve_engine(Engine& engine) {
  return std::make_unique<EngineAdapter>(engine);
}

}  // namespace dsv4::server
