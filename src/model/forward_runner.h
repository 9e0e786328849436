// How a caller's main-model forwards run: eagerly (Model::forward, the default), or through a
// backend that records a forward once and replays it (cuda::CudaGraphForward). The engine, the
// tools and the benchmarks take a runner, so the choice is made once where the backend is made.
#pragma once

#include "model/model.h"

namespace dsv4 {

class ForwardRunner {
 public:
  virtual ~ForwardRunner() = default;
  // What model.forward(ops, batch) returns, with the same effects on the batch's caches.
  virtual ForwardResult forward(const Model& model, Ops& ops, const ForwardBatch& batch) = 0;
  // Whether decode steps (not exact math) are recorded and replayed by their sequences' graph
  // keys (SequenceCache::graph_key): a caller then pads its decode batches to a few sizes, so
  // that a few recordings serve every batch.
  virtual bool records_decode_steps() const { return false; }
};

// Model::forward, as is.
class EagerForward final : public ForwardRunner {
 public:
  ForwardResult forward(const Model& model, Ops& ops, const ForwardBatch& batch) override {
    return model.forward(ops, batch);
  }
};

}  // namespace dsv4
