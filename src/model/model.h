// The DeepSeek-V4 model (MODEL.md §2.2): embedding into n residual streams, L blocks of
// attention and MoE joined by mHC, hc_head, the final norm and the head; plus the MTP module
// (§10.1). Written once against Ops; immutable after construction. Every forward takes its
// batch and the sequences' caches as arguments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/cache.h"
#include "model/forward_batch.h"
#include "model/model_weights.h"
#include "ops/ops.h"

namespace dsv4 {

struct ForwardContext;

struct ForwardResult {
  DeviceTensor logits;        // [T or sequences, V] f32 (per options.logits; empty for kNone)
  DeviceTensor final_hidden;  // [T, D] after hc_head and the final norm
  DeviceTensor streams;       // [T, n, D] the residual streams before hc_head (the MTP's input)
};

class Model {
 public:
  Model(Ops& ops, ModelConfig cfg, ModelWeights weights);

  // config.json plus the safetensors checkpoint of a model folder; `progress` hears of each tensor.
  // Of the routed experts, `share`'s: a model holding a share runs its forwards with an expert
  // group of that rank and size (ForwardOptions::expert_group), and refuses others.
  static Model load(Ops& ops, const std::filesystem::path& dir, const LoadProgressFn& progress = {},
                    const ExpertShare& share = {});
  // Random weights of cfg's full geometry, made by the backend (dummy_model_weights; with
  // share_layers, layers of one kind share their weights: benchmarks only), `share`'s experts.
  static Model dummy(Ops& ops, ModelConfig cfg, uint64_t seed, bool share_layers = false,
                     const LoadProgressFn& progress = {}, const ExpertShare& share = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return weights_; }

  // Empty caches for a sequence of up to `capacity` tokens, in the dtype a forward with
  // `exact_math` needs, its compressed entries and indexer keys in a pool of its own (one page).
  SequenceCache new_sequence(Ops& ops, int64_t capacity, bool exact_math) const;
  // The same in cache dtype `cache_dtype` (forward_cache_dtype, or kF8E4M3's packed entries).
  SequenceCache new_sequence(Ops& ops, int64_t capacity, DType cache_dtype) const;
  // The same with those caches in pages of `pool`, shared with other sequences (new_cache_pool),
  // taken from it or named by its owner (model/cache.h), and the fixed-size state in a slot of
  // `slots` (new_state_slots; null: a slot of its own).
  SequenceCache new_sequence(Ops& ops, std::shared_ptr<CachePool> pool, int64_t capacity,
                             PageNaming naming = PageNaming::kTakenFromPool,
                             std::shared_ptr<StateSlots> slots = nullptr) const;
  // A page pool for sequences of this model (CachePool::pages_for sizes one) in cache dtype
  // `cache_dtype` (forward_cache_dtype, or kF8E4M3 for packed entries beside bf16 forwards).
  std::shared_ptr<CachePool> new_cache_pool(Ops& ops, const CachePool::PagesByRatio& pages, DType cache_dtype) const;
  // State slots for up to `slots` sequences of this model at once, windows in `cache_dtype`.
  std::shared_ptr<StateSlots> new_state_slots(Ops& ops, int64_t slots, DType cache_dtype) const;

  // The main model over the batch; advances each sequence's length by its tokens.
  ForwardResult forward(Ops& ops, const ForwardBatch& batch) const;

  // Main layer `layer` alone on the streams [T, n, D] (for per-layer comparisons): returns the
  // layer's output streams. Updates that layer's caches, not the sequences' lengths.
  DeviceTensor forward_layer(Ops& ops, const ForwardBatch& batch, int64_t layer, const DeviceTensor& streams) const;

  // The MTP module (mtp.0): batch.token_ids are the next tokens, positions continue each
  // sequence's mtp_length(), and `streams` [T, n, D] are the main model's pre-hc_head streams at
  // those positions. Advances each sequence's mtp_length.
  ForwardResult forward_mtp(Ops& ops, const ForwardBatch& batch, const DeviceTensor& streams) const;

  // What a forward exchanges, for a rank of an expert group (ForwardOptions::expert_group) with
  // no tokens in a step: each main layer's MoE (with `mtp`, the MTP layers', as forward_mtp's) with
  // its share of the experts serving the other ranks' rows, in the numerics `exact_math` names
  // (which every rank shares). Every rank makes each step's forward together, this one included.
  void forward_without_tokens(Ops& ops, ExpertComm& group, bool exact_math, bool mtp = false) const;

 private:
  void run_layer(const ForwardContext& ctx, int64_t layer, DeviceTensor& streams) const;
  const LayerWeights& layer_weights(int64_t layer) const;
  DeviceTensor logits(const ForwardContext& ctx, const DeviceTensor& hidden) const;
  // hc_head, the final norm and the logits of the streams [T, n, D] (the main model's or the
  // MTP's); the observed tensors are named observed_prefix + "hc_head.input" / "final_hidden".
  ForwardResult head(const ForwardContext& ctx, const HcWeights& hc, const Weight& norm, const DeviceTensor& streams,
                     const std::string& observed_prefix) const;

  ModelConfig cfg_;
  ModelWeights weights_;
  std::vector<DeviceTensor> inv_freq_;  // per layer (main, then MTP): [r / 2] f32
};

}  // namespace dsv4
