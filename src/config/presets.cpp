// The presets of `dsv4 make-model`, built as ModelParams and checked by ModelConfig like any
// config.json.
#include "config/presets.h"

#include "core/error.h"

namespace dsv4 {

namespace {

// Fields every preset shares with the released models (MODEL.md §1.1): 512-d heads with a 64-d
// RoPE part, 128-token window, YaRN on compressed layers, 4 mHC streams, sqrtsoftplus routing,
// FP4 experts, one MTP layer.
ModelParams common_params() {
  ModelParams p;
  p.vocab_size = 129280;
  p.num_key_value_heads = 1;
  p.head_dim = 512;
  p.qk_rope_head_dim = 64;
  p.sliding_window = 128;
  p.compress_rope_theta = 160000;
  p.rope_theta = 10000;
  p.rope_factor = 16;
  p.original_max_position_embeddings = 65536;
  p.beta_fast = 32;
  p.beta_slow = 1;
  p.max_position_embeddings = 1048576;
  p.index_head_dim = 128;
  p.hc_mult = 4;
  p.hc_sinkhorn_iters = 20;
  p.hc_eps = 1e-6;
  p.rms_norm_eps = 1e-6;
  p.n_shared_experts = 1;
  p.scoring_func = ScoringFunc::kSqrtSoftplus;
  p.norm_topk_prob = true;
  p.swiglu_limit = 10.0;
  p.num_nextn_predict_layers = 1;
  p.expert_dtype = ExpertDType::kFp4;
  p.bos_token_id = 0;
  p.eos_token_id = 1;
  return p;
}

// MODEL.md §13 T1 with the real vocabulary: one layer of each kind (SWA-only + hash routed, CSA,
// HCA, CSA), an SWA-only score-routed MTP layer; widths stay multiples of 128 (FP8 tiles).
ModelParams tiny_params() {
  ModelParams p = common_params();
  p.hidden_size = 512;
  p.num_hidden_layers = 4;
  p.num_attention_heads = 8;
  p.q_lora_rank = 256;
  p.o_groups = 2;
  p.o_lora_rank = 128;
  p.compress_ratios = {0, 4, 128, 4, 0};
  p.max_position_embeddings = 4096;
  p.index_n_heads = 4;
  p.index_topk = 16;
  p.n_routed_experts = 8;
  p.num_experts_per_tok = 2;
  p.moe_intermediate_size = 256;
  p.routed_scaling_factor = 1.5;
  p.num_hash_layers = 1;
  return p;
}

// MODEL.md §13 T2: T1 with Pro's topology (HCA first, no SWA-only main layer) and hash routing on
// a CSA and an HCA layer too.
ModelParams pro_topology_params() {
  ModelParams p = tiny_params();
  p.compress_ratios = {128, 4, 128, 4, 0};
  p.routed_scaling_factor = 2.5;
  p.num_hash_layers = 3;
  return p;
}

// V4-Flash (MODEL.md §1.1).
ModelParams flash_params() {
  ModelParams p = common_params();
  p.hidden_size = 4096;
  p.num_hidden_layers = 43;
  p.num_attention_heads = 64;
  p.q_lora_rank = 1024;
  p.o_groups = 8;
  p.o_lora_rank = 1024;
  p.compress_ratios = {0, 0};
  for (int i = 0; i < 20; ++i) p.compress_ratios.insert(p.compress_ratios.end(), {4, 128});
  p.compress_ratios.insert(p.compress_ratios.end(), {4, 0});
  p.index_n_heads = 64;
  p.index_topk = 512;
  p.n_routed_experts = 256;
  p.num_experts_per_tok = 6;
  p.moe_intermediate_size = 2048;
  p.routed_scaling_factor = 1.5;
  p.num_hash_layers = 3;
  return p;
}

// MODEL.md §13 T3: V4-Flash's exact geometry with two main layers, CSA then HCA. Real Flash
// layers 2 (CSA, hash routed: Flash hashes layers 0-2) and 3 (HCA, score routed) load into it as
// layers 0 and 1, so num_hash_layers = 1 gives them the tensors they really have (tid2eid on
// layer 0, gate.bias on layer 1) and keeps both routing modes at production size.
ModelParams flash_2layer_params() {
  ModelParams p = flash_params();
  p.num_hidden_layers = 2;
  p.compress_ratios = {4, 128, 0};
  p.num_hash_layers = 1;
  return p;
}

// V4-Pro (MODEL.md §1.1; the published config.json).
ModelParams pro_params() {
  ModelParams p = common_params();
  p.hidden_size = 7168;
  p.num_hidden_layers = 61;
  p.num_attention_heads = 128;
  p.q_lora_rank = 1536;
  p.o_groups = 16;
  p.o_lora_rank = 1024;
  p.compress_ratios = {128, 128};
  for (int i = 0; i < 29; ++i) p.compress_ratios.insert(p.compress_ratios.end(), {4, 128});
  p.compress_ratios.insert(p.compress_ratios.end(), {4, 0});
  p.index_n_heads = 64;
  p.index_topk = 1024;
  p.n_routed_experts = 384;
  p.num_experts_per_tok = 6;
  p.moe_intermediate_size = 3072;
  p.routed_scaling_factor = 2.5;
  p.num_hash_layers = 3;
  return p;
}

struct Preset {
  PresetInfo info;
  ModelParams (*params)();
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {{"tiny", "MODEL.md T1: 4 layers (swa, csa, hca, csa) + MTP, D=512, 8 experts, vocab 129280"},
       tiny_params},
      {{"pro-topology", "MODEL.md T2: tiny with Pro's layout (hca, csa, hca, csa), 3 hash layers"},
       pro_topology_params},
      {{"flash-2layer", "MODEL.md T3: V4-Flash geometry, 2 layers (csa, hca) + MTP"},
       flash_2layer_params},
      {{"flash", "V4-Flash, full size (43 layers, 256 experts)"}, flash_params},
      {{"pro", "V4-Pro, full size (61 layers, 384 experts)"}, pro_params},
  };
  return table;
}

}  // namespace

const std::vector<PresetInfo>& model_presets() {
  static const std::vector<PresetInfo> infos = [] {
    std::vector<PresetInfo> out;
    for (const Preset& p : presets()) out.push_back(p.info);
    return out;
  }();
  return infos;
}

ModelConfig preset_config(std::string_view name) {
  std::string known;
  for (const Preset& p : presets()) {
    if (p.info.name == name) return ModelConfig(p.params(), "preset " + p.info.name);
    known += (known.empty() ? "" : ", ") + p.info.name;
  }
  throw UsageError("unknown model preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace dsv4
