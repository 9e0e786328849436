// The DeepSeek-V4 weights, arranged by block, as the backend keeps them (MODEL.md §7.2 names).
// Loading checks every tensor's name, dtype and shape against expected_tensors(cfg) and hands
// each to the backend's load_weight, which converts it for compute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "config/model_config.h"
#include "loader/safetensors.h"
#include "ops/ops.h"

namespace dsv4 {

struct HcWeights {
  Weight fn;      // [mix, n*D] f32 (mix = (2+n)*n for a block, n for a head)
  Weight base;    // [mix] f32
  Weight scale;   // [3] f32 for a block, [1] for a head
};

struct CompressorWeights {
  Weight wkv;     // [coff*dc, D]
  Weight wgate;   // [coff*dc, D]
  Weight ape;     // [m, coff*dc] f32
  Weight norm;    // [dc]
};

struct IndexerWeights {
  Weight wq_b;            // [Hi*dh, q_lora] fp8
  Weight weights_proj;    // [Hi, D] bf16
  CompressorWeights compressor;
};

struct AttentionWeights {
  Weight wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, attn_sink;
  std::optional<CompressorWeights> compressor;  // ratio > 0
  std::optional<IndexerWeights> indexer;        // ratio == 4
};

struct ExpertLinears {
  Weight w1, w2, w3;
};

struct MoeWeights {
  Weight gate;                       // [E, D]
  std::optional<Weight> bias;        // [E] f32, score-routed layers
  std::optional<Weight> tid2eid;     // [V, k], hash layers
  // The routed experts held: all E, or an expert-parallel rank's share (ExpertShare), experts
  // [first_expert, first_expert + experts.size()).
  std::vector<ExpertLinears> experts;
  int64_t first_expert = 0;
  ExpertLinears shared;
};

struct LayerWeights {
  Weight attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {
  Weight e_proj, h_proj, enorm, hnorm, norm;
  HcWeights hc_head;
  LayerWeights block;
};

struct ModelWeights {
  Weight embed, head, norm;
  HcWeights hc_head;
  std::vector<LayerWeights> layers;
  std::vector<MtpWeights> mtp;
};

// How far a load has come, after each tensor (bytes as the checkpoint stores them).
struct LoadProgress {
  size_t tensors_done = 0;
  size_t tensors_total = 0;
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
};
using LoadProgressFn = std::function<void(const LoadProgress&)>;

// Which routed experts a model's weights hold (docs/ARCHITECTURE.md "Several devices"): rank
// `rank` of `ranks` holds experts [rank E / ranks, (rank + 1) E / ranks) of every MoE layer (MTP
// included) and runs its forwards with an expert group of that rank and size; the default, all.
struct ExpertShare {
  int rank = 0;
  int ranks = 1;
  bool all() const { return ranks == 1; }
  int64_t first(int64_t num_experts) const { return rank * count(num_experts); }
  int64_t count(int64_t num_experts) const { return num_experts / ranks; }
};
// UsageError unless `share` is a rank of a group that splits cfg's routed experts evenly.
void check_expert_share(const ModelConfig& cfg, const ExpertShare& share);

// Reads every tensor of a checkpoint of `cfg` (of the routed experts, `share`'s; the others are
// neither read nor counted in the progress); TensorError names a missing or mismatched tensor.
ModelWeights load_model_weights(Ops& ops, const ModelConfig& cfg, const Checkpoint& checkpoint,
                                const LoadProgressFn& progress = {}, const ExpertShare& share = {});

// Random weights of the configuration's full geometry without a checkpoint (`--load-format
// dummy`, for speed and memory runs): linears and the embedding from Ops::dummy_weight, made where
// the backend keeps them; the small shaping tensors as synthesize_tensor(cfg, e, seed) makes them.
// With `share_layers`, each main layer takes the weights of the first main layer of its kind and
// routing (benchmark only: a whole model's step on one GPU whose memory cannot hold every layer;
// each layer still streams weights far larger than L2, so a step moves the bytes it would).
// Of the routed experts, `share`'s are made (each the values it has in the whole model's).
ModelWeights dummy_model_weights(Ops& ops, const ModelConfig& cfg, uint64_t seed, bool share_layers = false,
                                 const LoadProgressFn& progress = {}, const ExpertShare& share = {});

}  // namespace dsv4
