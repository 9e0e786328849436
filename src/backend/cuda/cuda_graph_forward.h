// Decode steps as CUDA graphs (ARCHITECTURE.md idea 7): a forward in which every sequence brings
// one token is recorded the first time its sequences' graph keys are seen (their state slots, page
// pool and capacities in batch order: SequenceCache::graph_key), from the same Model::forward that
// runs eagerly (CudaOps captures instead of launching; the attention layer's fork/joins become
// branches of the graph), and replayed at every later step with those keys, whichever sequences
// hold the slots by then (a serving engine's sequences come and go through the same slots): the
// step's StepPlan is uploaded into the buffer the graph reads, the graph is launched, and its
// logits are copied out. The host's work per step is then one upload, one launch and one copy,
// whatever the model's depth. Replays give the eager forward's bits: the kernels and their
// arguments are the same, only launch shapes are sized from bounds (CudaOps::begin_capture).
//
// Other forwards (prefill chunks, exact math, observers, another backend's ops) run eagerly, as
// do forwards whose ops cannot be captured (the host-grouped MoE path); keys whose capture failed
// so are remembered and not tried again.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/cuda_ops.h"
#include "model/forward_runner.h"

namespace dsv4::cuda {

class CudaGraphForward final : public ForwardRunner {
 public:
  // Keeps up to max_graphs graphs, dropping the least recently used (each holds its activations'
  // device memory and its plan buffer); a graph serves positions below a power of two of at least
  // min_positions_bound (Entry::positions_bound).
  explicit CudaGraphForward(CudaOps& ops, size_t max_graphs = 8, int64_t min_positions_bound = 4096);

  ForwardResult forward(const Model& model, Ops& ops, const ForwardBatch& batch) override;
  bool records_decode_steps() const override;

  struct Stats {
    int64_t captures = 0;
    int64_t replays = 0;      // graph launches after the capturing one
    int64_t eager = 0;        // forwards that ran eagerly
    size_t last_graph_nodes = 0;  // nodes of the graph of the last replayed or captured step
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Key {
    std::vector<SequenceCache::GraphKey> caches;  // each sequence's, in batch order
    LogitsFor logits = LogitsFor::kAllTokens;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    // The graph serves steps whose positions are all below it: the captured step's highest
    // position + 1 rounded up to a power of two, at least min_positions_bound. Its plan's block
    // tables cover those positions (ForwardBatch::table_positions), and the launch shapes the
    // tables bound with them, so both follow the context, not max_model_len; a sequence's steps
    // are recorded again as its context doubles.
    int64_t positions_bound = 0;
    std::unique_ptr<CudaGraph> graph;  // null: this set of sequences cannot be captured
    DeviceTensor plan;                 // the StepPlan ints the graph's ops read
    DeviceTensor logits;               // where the graph leaves the logits
  };

  // Whether `batch` is a decode step a graph can run.
  bool graphable(const Model& model, Ops& ops, const ForwardBatch& batch) const;
  // Records the step into a new entry serving positions below `positions_bound` and runs it; the
  // entry says whether it worked.
  Entry& capture(const Model& model, const ForwardBatch& batch, Key key, int64_t positions_bound,
                 const std::vector<int32_t>& plan);
  ForwardResult logits_of(const Entry& e);

  CudaOps& ops_;
  size_t max_graphs_;
  int64_t min_positions_bound_;
  std::list<Entry> entries_;  // most recently used first
  Stats stats_;
};

}  // namespace dsv4::cuda
