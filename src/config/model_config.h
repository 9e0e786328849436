// ModelConfig: the DeepSeek-V4 hyper-parameters, parsed once from config.json (the Hugging
// Face key style or DeepSeek's inference/ModelArgs key style, MODEL.md §1), validated, and
// immutable afterwards, with the derived per-layer kinds (SWA-only / CSA / HCA).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dsv4 {

// Attention kind of a layer, from its compress ratio: 0 -> SWA-only, 4 -> CSA, 128 -> HCA.
enum class LayerKind { kSwa, kCsa, kHca };
std::string_view layer_kind_name(LayerKind kind);  // "swa", "csa", "hca"

enum class ScoringFunc { kSqrtSoftplus, kSoftmax, kSigmoid };
enum class ExpertDType { kFp4, kFp8 };

// The raw fields, in the Hugging Face spelling. Filled by the parser or by a preset, then
// checked by ModelConfig's constructor; nothing reads an unchecked ModelParams.
struct ModelParams {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 1;
  int64_t head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;
  std::vector<int64_t> compress_ratios;  // one per main layer, then one per MTP layer
  double compress_rope_theta = 0;
  double rope_theta = 0;
  // YaRN (rope_scaling); original_max_position_embeddings == 0 means no YaRN.
  double rope_factor = 1;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32;
  double beta_slow = 1;
  int64_t max_position_embeddings = 0;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  double hc_eps = 0;
  double rms_norm_eps = 0;
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t moe_intermediate_size = 0;
  ScoringFunc scoring_func = ScoringFunc::kSqrtSoftplus;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1;
  double swiglu_limit = 0;
  int64_t num_hash_layers = 0;
  int64_t num_nextn_predict_layers = 0;
  ExpertDType expert_dtype = ExpertDType::kFp4;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
};

class ModelConfig {
 public:
  // Validates every field; throws ConfigError naming the field, its value and the rule.
  // `source` names where the values came from (a file path or a preset) for the messages.
  explicit ModelConfig(ModelParams params, std::string source = "config");

  const ModelParams& params() const { return p_; }
  const ModelParams* operator->() const { return &p_; }
  const std::string& source() const { return source_; }

  int64_t num_layers() const { return p_.num_hidden_layers; }
  int64_t num_mtp_layers() const { return p_.num_nextn_predict_layers; }
  // Layers 0..L-1 are the main layers; L..L+mtp-1 the MTP layers.
  int64_t compress_ratio(int64_t layer) const;
  LayerKind layer_kind(int64_t layer) const;
  bool is_hash_layer(int64_t layer) const { return layer < p_.num_hash_layers; }
  const std::vector<LayerKind>& layer_kinds() const { return kinds_; }  // main layers only
  int64_t count_layers(LayerKind kind) const;

  int64_t nope_head_dim() const { return p_.head_dim - p_.qk_rope_head_dim; }
  bool uses_yarn(int64_t layer) const { return compress_ratio(layer) > 0; }

  // The configuration in the Hugging Face key style (what make-model writes as config.json).
  nlohmann::json to_json() const;

 private:
  ModelParams p_;
  std::string source_;
  std::vector<LayerKind> kinds_;
  std::vector<LayerKind> mtp_kinds_;
};

// Parses either key style (detected by `hidden_size` vs `dim`). `source` is used in messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
// Reads and parses a config.json file; errors name the file.
ModelConfig load_model_config(const std::filesystem::path& file);

}  // namespace dsv4
