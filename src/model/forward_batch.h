// The arguments of one forward: which tokens of which sequences, at which positions, with which
// numerics, and who watches. Built by the caller, read by the model; only the sequences' caches
// change during a forward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/cache.h"

namespace dsv4 {

class ExpertComm;

// Receives named intermediate tensors while a forward runs, named as in the golden files
// (MODEL.md reference contract): "layers.{l}.input", "layers.{l}.experts",
// "layers.{l}.expert_weights", "layers.{l}.indexer_topk", "hc_head.input", "final_hidden", and
// for the MTP forward "mtp.hc_head.input", "mtp.final_hidden". The view is valid only during
// the call and lives in backend memory.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void on_tensor(std::string_view name, ConstTensorView tensor) = 0;
};

enum class LogitsFor {
  kAllTokens,              // [T, V]
  kLastTokenOfSequence,    // [sequences, V], the last token of each
  kNone,
};

struct ForwardOptions {
  // No FP8/FP4 activation quantisation, no QAT rounding, every activation fp32 (the caches must
  // be f32 too). Weights stay their exact dequantised values.
  bool exact_math = false;
  LogitsFor logits = LogitsFor::kAllTokens;
  // Expert parallelism (model/expert_parallel.h): this rank's group. Every MoE layer then runs
  // the rank's share of the routed experts (rank r of N: experts [r E/N, (r + 1) E/N)) on rows
  // from every rank; all ranks of the group run their forwards together (their own tokens, the
  // same layers in the same order). Null: all experts here.
  ExpertComm* expert_group = nullptr;
};

struct SequenceChunk {
  SequenceCache* cache = nullptr;
  int64_t num_tokens = 0;
  int64_t start_pos = 0;   // the cache's length() (main model) or mtp_length() (MTP forward)
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [T] the sequences' tokens, concatenated in order
  std::vector<int32_t> positions;        // [T]
  std::vector<SequenceChunk> sequences;
  ForwardOptions options;
  ForwardObserver* observer = nullptr;
  // The batch's StepPlan ints already in backend memory (a CUDA graph's input buffer, which the
  // graph's ops read at every replay); empty: the forward uploads its plan itself.
  DeviceTensor planned;
  // > 0: the plan's block tables cover the entries of positions below it (at least every position
  // of the batch), not each cache's whole capacity: what a recorded step that serves positions
  // below a bound passes, so that its plan does not grow with max_model_len.
  int64_t table_positions = 0;

  // Appends a sequence's next tokens at positions start_pos, start_pos + 1, ...
  void add(SequenceCache& cache, std::span<const int32_t> ids, int64_t start_pos) {
    sequences.push_back({&cache, static_cast<int64_t>(ids.size()), start_pos});
    for (size_t i = 0; i < ids.size(); ++i) {
      token_ids.push_back(ids[i]);
      positions.push_back(static_cast<int32_t>(start_pos + static_cast<int64_t>(i)));
    }
  }
  // The main model's next tokens of a sequence.
  void add(SequenceCache& cache, std::span<const int32_t> ids) { add(cache, ids, cache.length()); }

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  // Every sequence brings one token: a decode step, what a recording runner records.
  bool one_token_each() const {
    return !sequences.empty() &&
           std::all_of(sequences.begin(), sequences.end(), [](const SequenceChunk& c) { return c.num_tokens == 1; });
  }
};

}  // namespace dsv4
