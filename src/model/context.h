// What every block of one forward reads: the backend, the config, the batch's tokens and
// sequences, and the numerics of the mode. Built once per forward and never stored; blocks
// change only the sequences' caches. Also the few thin helpers every block uses.
#pragma once

#include <array>

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/cache.h"
#include "model/forward_batch.h"
#include "model/step_plan.h"
#include "ops/ops.h"

namespace dsv4 {

struct ForwardContext {
  // `mtp` picks which length the sequences' start positions must match.
  ForwardContext(Ops& ops, const ModelConfig& cfg, const ForwardBatch& batch, bool mtp);

  Ops& ops;
  const ModelConfig& cfg;
  const ForwardBatch& batch;
  StepPlan plan;           // checks the batch
  int64_t T;
  DType act;               // activations and caches: kBF16, or kF32 in exact-math mode
  ActQuant fp8_act;        // activation quantisation of FP8/FP4 linears (kNone in exact math)
  bool qat;                // QAT rounding of kv, compressed entries and indexer q/k
  DeviceTensor plan_ints;  // the plan's ints in backend memory
  DeviceTensor token_ids;  // [T] i32
  DeviceTensor positions;  // [T] i32
  DeviceTensor window_rows;  // [T] i32 (StepPlan::window_rows)
  std::vector<SeqSlice> slices;

  // A field of the plan in backend memory, [size] i32.
  DeviceTensor field(StepPlan::Field f) const { return plan_ints.part(f.offset, {f.size}); }

  // An op's output within the forward (the op writes all of it, so it need not be zeroed).
  DeviceTensor alloc(DType dtype, Shape shape) const { return ops.alloc_output(dtype, std::move(shape)); }
  SequenceCache& cache(size_t seq) const { return *batch.sequences[seq].cache; }
  // Sequence seq's caches of `layer` as the ops address them: the compressed entries and the
  // indexer keys are its pool's pages through its block table in the plan; the window ring, a
  // cache of one page, for its writes.
  PagedCache compressed(size_t seq, int64_t layer) const;
  PagedCache index_keys(size_t seq, int64_t layer) const;
  PagedCache window(size_t seq, int64_t layer) const;
  void observe(const std::string& name, const DeviceTensor& t) const {
    if (batch.observer != nullptr) batch.observer->on_tensor(name, t.view());
  }
};

// A forward's activation dtype and its FP8/FP4 linears' activation quantisation, as
// ForwardOptions::exact_math names them (ForwardContext's act and fp8_act): kF32 and none in exact
// math, kBF16 and 128-blocks otherwise.
DType forward_act_dtype(bool exact_math);
ActQuant forward_fp8_act(bool exact_math);

// The activation quantisation w's checkpoint format calls for: fp8_act for FP8/FP4 weights, none
// for plain ones.
ActQuant act_quant_for(ActQuant fp8_act, const Weight& w);
ActQuant act_quant_for(const ForwardContext& ctx, const Weight& w);

// y = x @ w^T with the activation quantisation w's checkpoint format calls for; y has `out` dtype.
DeviceTensor linear(const ForwardContext& ctx, const DeviceTensor& x, const Weight& w, DType out);

// linear(x, a) and linear(x, b) as one Ops::linears (the same numbers; one launch where the
// backend can).
std::array<DeviceTensor, 2> linear_pair(const ForwardContext& ctx, const DeviceTensor& x, const Weight& a,
                                        const Weight& b, DType out);

// RMSNorm of the rows of x ([rows, dim]); weight nullptr for the weight-free norm. Output in act.
DeviceTensor rms_norm(const ForwardContext& ctx, const DeviceTensor& x, const Weight* weight);

}  // namespace dsv4
