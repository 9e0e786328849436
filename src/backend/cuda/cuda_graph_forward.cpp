// CudaGraphForward: choosing the graph path, capturing a decode step, replaying it.
#include "backend/cuda/cuda_graph_forward.h"

#include <algorithm>

#include "core/error.h"
#include "model/step_plan.h"

namespace dsv4::cuda {

CudaGraphForward::CudaGraphForward(CudaOps& ops, size_t max_graphs, int64_t min_positions_bound)
    : ops_(ops), max_graphs_(std::max<size_t>(1, max_graphs)), min_positions_bound_(std::max<int64_t>(1, min_positions_bound)) {}

bool CudaGraphForward::graphable(const Model& model, Ops& ops, const ForwardBatch& batch) const {
  (void)model;
  if (&ops != static_cast<Ops*>(&ops_) || ops_.capturing()) return false;
  if (batch.options.exact_math || batch.observer != nullptr || !batch.planned.empty()) return false;
  if (batch.options.logits == LogitsFor::kNone) return false;
  return records_decode_steps() && batch.one_token_each();
}

// The MoE experts group their rows on the host (a wait) unless the FP8 GEMM is the MMA kernel.
bool CudaGraphForward::records_decode_steps() const { return uses_fp8_mma(ops_.options().fp8_gemm); }

ForwardResult CudaGraphForward::forward(const Model& model, Ops& ops, const ForwardBatch& batch) {
  if (!graphable(model, ops, batch)) {
    ++stats_.eager;
    return model.forward(ops, batch);
  }
  Key key;
  key.logits = batch.options.logits;
  int64_t positions = 0;  // the step's highest position + 1
  for (const SequenceChunk& c : batch.sequences) {
    key.caches.push_back(c.cache->graph_key());
    positions = std::max(positions, c.cache->length() + 1);
  }

  auto found = std::find_if(entries_.begin(), entries_.end(),
                            [&](const Entry& e) { return e.key == key && e.positions_bound >= positions; });
  int64_t bound = min_positions_bound_;
  if (found != entries_.end()) {
    bound = found->positions_bound;
  } else {
    while (bound < positions) bound *= 2;
  }
  // The plan checks the batch against its caches, as the eager forward would; its block tables
  // cover the graph's positions bound, the layout the graph reads.
  ForwardBatch bounded = batch;
  bounded.table_positions = bound;
  const StepPlan plan(model.config(), bounded, /*mtp=*/false);
  if (found == entries_.end()) {
    Entry& e = capture(model, bounded, std::move(key), bound, plan.ints());
    if (e.graph == nullptr) {
      ++stats_.eager;
      return model.forward(ops, batch);
    }
    return logits_of(e);
  }
  entries_.splice(entries_.begin(), entries_, found);
  Entry& e = entries_.front();
  if (e.graph == nullptr) {
    ++stats_.eager;
    return model.forward(ops, batch);
  }
  const auto n = static_cast<int64_t>(plan.ints().size());
  ops_.upload(host_view(plan.ints().data(), DType::kI32, {n}), e.plan.view());
  e.graph->launch(ops_.stream());
  for (const SequenceChunk& c : batch.sequences) c.cache->advance(c.num_tokens);
  ++stats_.replays;
  return logits_of(e);
}

CudaGraphForward::Entry& CudaGraphForward::capture(const Model& model, const ForwardBatch& batch, Key key,
                                                   int64_t positions_bound, const std::vector<int32_t>& plan) {
  while (entries_.size() >= max_graphs_) entries_.pop_back();
  entries_.push_front({std::move(key), positions_bound, nullptr, {}, {}});
  Entry& e = entries_.front();
  const auto n = static_cast<int64_t>(plan.size());
  e.plan = ops_.alloc(DType::kI32, {n});
  ops_.upload(host_view(plan.data(), DType::kI32, {n}), e.plan.view());
  e.logits = ops_.alloc(DType::kF32, {batch.num_tokens(), model.config()->vocab_size});

  ForwardBatch recorded = batch;
  recorded.planned = e.plan;
  std::vector<int64_t> lengths;
  for (const SequenceChunk& c : batch.sequences) lengths.push_back(c.cache->length());
  ops_.begin_capture();
  try {
    {
      // Everything the forward makes dies inside the capture, so its frees are graph nodes.
      const ForwardResult r = model.forward(ops_, recorded);
      ops_.copy({r.logits.view(), e.logits.view()});
    }
    e.graph = ops_.end_capture();
  } catch (const UsageError&) {
    // An op that cannot be captured (it waits for the device): this set of sequences runs eagerly.
    ops_.abort_capture();
    for (size_t s = 0; s < batch.sequences.size(); ++s)
      batch.sequences[s].cache->advance(lengths[s] - batch.sequences[s].cache->length());
    e.plan = {};
    e.logits = {};
    return e;
  } catch (...) {
    ops_.abort_capture();
    for (size_t s = 0; s < batch.sequences.size(); ++s)
      batch.sequences[s].cache->advance(lengths[s] - batch.sequences[s].cache->length());
    entries_.pop_front();
    throw;
  }
  // The capture recorded the step (and advanced the lengths); this launch runs it.
  e.graph->launch(ops_.stream());
  ++stats_.captures;
  return e;
}

ForwardResult CudaGraphForward::logits_of(const Entry& e) {
  stats_.last_graph_nodes = e.graph->nodes();
  ForwardResult r;
  r.logits = ops_.alloc_output(DType::kF32, e.logits.shape());
  ops_.copy({e.logits.view(), r.logits.view()});
  return r;
}

}  // namespace dsv4::cuda
