// Parsing and validation of DeepSeek-V4 config.json in the Hugging Face key style (MODEL.md
// §1.1) and in DeepSeek's inference/ModelArgs key style (§1.2).
#include "config/model_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsv4 {

using nlohmann::json;

std::string_view layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kSwa: return "swa";
    case LayerKind::kCsa: return "csa";
    case LayerKind::kHca: return "hca";
  }
  return "?";
}

namespace {

std::string scoring_name(ScoringFunc f) {
  switch (f) {
    case ScoringFunc::kSqrtSoftplus: return "sqrtsoftplus";
    case ScoringFunc::kSoftmax: return "softmax";
    case ScoringFunc::kSigmoid: return "sigmoid";
  }
  return "?";
}

// Reads typed fields out of one JSON object, naming the source and the key in every error.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {
    if (!obj_.is_object()) fail_at("", "must be a JSON object, got " + std::string(obj_.type_name()));
  }

  bool has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  int64_t integer(const std::string& key) const {
    const json& v = get(key);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(key, v, "is out of range (larger than 2^63 - 1)");
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {  // accept 16.0 for an integer field, reject 16.5
      const double d = v.get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    fail(key, v, "must be an integer");
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }

  double number(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_number()) fail(key, v, "must be a number");
    return v.get<double>();
  }
  double number(const std::string& key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }

  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = get(key);
    if (!v.is_boolean()) fail(key, v, "must be true or false");
    return v.get<bool>();
  }

  std::string string(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_string()) fail(key, v, "must be a string");
    return v.get<std::string>();
  }

  std::vector<int64_t> int_list(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_array()) fail(key, v, "must be a list of integers");
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer())
        fail(key + "[" + std::to_string(i) + "]", v[i], "must be an integer");
      if (v[i].is_number_unsigned() && v[i].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        fail(key + "[" + std::to_string(i) + "]", v[i], "is out of range (larger than 2^63 - 1)");
      out.push_back(v[i].get<int64_t>());
    }
    return out;
  }

  FieldReader object(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_object()) fail(key, v, "must be a JSON object");
    return FieldReader(v, source_, prefix_ + key + ".");
  }

  [[noreturn]] void fail(const std::string& key, const json& value, const std::string& rule) const {
    fail_at(key, "= " + value.dump() + ": " + rule);
  }

 private:
  const json& get(const std::string& key) const {
    if (!has(key)) fail_at(key, "is missing (required)");
    return obj_.at(key);
  }
  [[noreturn]] void fail_at(const std::string& key, const std::string& what) const {
    throw ConfigError(source_ + ": field '" + prefix_ + key + "' " + what);
  }

  const json& obj_;
  std::string source_;
  std::string prefix_;
};

ScoringFunc parse_scoring(const FieldReader& r, const std::string& key) {
  const std::string s = r.string(key);
  if (s == "sqrtsoftplus") return ScoringFunc::kSqrtSoftplus;
  if (s == "softmax") return ScoringFunc::kSoftmax;
  if (s == "sigmoid") return ScoringFunc::kSigmoid;
  r.fail(key, s, "must be one of sqrtsoftplus, softmax, sigmoid");
}

ExpertDType parse_expert_dtype(const FieldReader& r, const std::string& key) {
  if (!r.has(key)) return ExpertDType::kFp4;  // vLLM's default when absent (MODEL.md §1.1)
  const std::string s = r.string(key);
  if (s == "fp4") return ExpertDType::kFp4;
  if (s == "fp8") return ExpertDType::kFp8;
  r.fail(key, s, "must be \"fp4\" or \"fp8\"");
}

// YaRN fields from a rope_scaling-like object (HF) into params.
void read_yarn(const FieldReader& rs, ModelParams& p) {
  const std::string type = rs.has("type") ? rs.string("type") : rs.string("rope_type");
  if (type != "yarn")
    rs.fail(rs.has("type") ? "type" : "rope_type", type, "only \"yarn\" scaling is supported");
  p.rope_factor = rs.number("factor");
  p.original_max_position_embeddings = rs.integer("original_max_position_embeddings");
  p.beta_fast = rs.number("beta_fast", 32);
  p.beta_slow = rs.number("beta_slow", 1);
}

// The checkpoint's quantization_config, when present, must describe the released format.
void check_quantization(const FieldReader& r) {
  if (!r.has("quantization_config")) return;
  const FieldReader q = r.object("quantization_config");
  if (q.has("quant_method") && q.string("quant_method") != "fp8")
    q.fail("quant_method", q.string("quant_method"), "only \"fp8\" checkpoints are supported");
  if (q.has("fmt") && q.string("fmt") != "e4m3")
    q.fail("fmt", q.string("fmt"), "only \"e4m3\" is supported");
  if (q.has("scale_fmt") && q.string("scale_fmt") != "ue8m0")
    q.fail("scale_fmt", q.string("scale_fmt"), "only \"ue8m0\" scales are supported");
  if (q.has("weight_block_size")) {
    const auto b = q.int_list("weight_block_size");
    if (b != std::vector<int64_t>{128, 128})
      q.fail("weight_block_size", json(b), "must be [128, 128]");
  }
}

ModelParams parse_hf(const FieldReader& r) {
  ModelParams p;
  if (r.has("model_type") && r.string("model_type") != "deepseek_v4")
    r.fail("model_type", r.string("model_type"), "must be \"deepseek_v4\"");
  p.vocab_size = r.integer("vocab_size");
  p.hidden_size = r.integer("hidden_size");
  p.num_hidden_layers = r.integer("num_hidden_layers");
  p.num_attention_heads = r.integer("num_attention_heads");
  p.num_key_value_heads = r.integer("num_key_value_heads", 1);
  p.head_dim = r.integer("head_dim");
  if (r.has("qk_rope_head_dim")) {
    p.qk_rope_head_dim = r.integer("qk_rope_head_dim");
  } else if (r.has("qk_nope_head_dim")) {  // transformers style: nope + rope = head_dim
    p.qk_rope_head_dim = p.head_dim - r.integer("qk_nope_head_dim");
  } else {
    p.qk_rope_head_dim = r.integer("qk_rope_head_dim");  // reports it missing
  }
  p.q_lora_rank = r.integer("q_lora_rank");
  p.o_groups = r.integer("o_groups");
  p.o_lora_rank = r.integer("o_lora_rank");
  p.sliding_window = r.integer("sliding_window");
  p.compress_ratios = r.int_list("compress_ratios");

  if (r.has("rope_parameters")) {
    // transformers / vLLM style: either flat, or nested {"main": {...}, "compress": {...}}.
    const FieldReader rp = r.object("rope_parameters");
    if (rp.has("main")) {
      p.rope_theta = rp.object("main").number("rope_theta");
      const FieldReader c = rp.object("compress");
      p.compress_rope_theta = c.number("rope_theta");
      read_yarn(c, p);
    } else if (r.has("compress_rope_parameters")) {
      p.rope_theta = rp.number("rope_theta");
      const FieldReader c = r.object("compress_rope_parameters");
      p.compress_rope_theta = c.number("rope_theta");
      read_yarn(c, p);
    } else {
      p.rope_theta = r.number("rope_theta");
      p.compress_rope_theta = r.number("compress_rope_theta");
      read_yarn(rp, p);
    }
  } else {
    p.rope_theta = r.number("rope_theta");
    p.compress_rope_theta = r.number("compress_rope_theta");
    if (r.has("rope_scaling")) read_yarn(r.object("rope_scaling"), p);
  }
  p.max_position_embeddings = r.integer("max_position_embeddings");
  p.index_n_heads = r.integer("index_n_heads");
  p.index_head_dim = r.integer("index_head_dim");
  p.index_topk = r.integer("index_topk");
  p.hc_mult = r.integer("hc_mult");
  p.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters");
  p.hc_eps = r.number("hc_eps");
  p.rms_norm_eps = r.number("rms_norm_eps");
  p.n_routed_experts = r.integer("n_routed_experts");
  p.num_experts_per_tok = r.integer("num_experts_per_tok");
  p.n_shared_experts = r.integer("n_shared_experts");
  p.moe_intermediate_size = r.integer("moe_intermediate_size");
  p.scoring_func = parse_scoring(r, "scoring_func");
  if (r.has("topk_method") && r.string("topk_method") != "noaux_tc")
    r.fail("topk_method", r.string("topk_method"), "only \"noaux_tc\" is supported");
  p.norm_topk_prob = r.boolean("norm_topk_prob", true);
  p.routed_scaling_factor = r.number("routed_scaling_factor");
  p.swiglu_limit = r.number("swiglu_limit");
  p.num_hash_layers = r.integer("num_hash_layers");
  p.num_nextn_predict_layers = r.integer("num_nextn_predict_layers");
  p.expert_dtype = parse_expert_dtype(r, "expert_dtype");
  p.bos_token_id = r.integer("bos_token_id", 0);
  p.eos_token_id = r.integer("eos_token_id", 1);
  check_quantization(r);
  return p;
}

// DeepSeek's inference/config.json. Fields the published file leaves out take ModelArgs'
// defaults: n_mtp_layers 1, norm_eps and hc_eps 1e-6; max_seq_len stands in for the position limit.
ModelParams parse_inference(const FieldReader& r) {
  ModelParams p;
  p.vocab_size = r.integer("vocab_size");
  p.hidden_size = r.integer("dim");
  p.num_hidden_layers = r.integer("n_layers");
  p.num_attention_heads = r.integer("n_heads");
  p.num_key_value_heads = 1;
  p.head_dim = r.integer("head_dim");
  p.qk_rope_head_dim = r.integer("rope_head_dim");
  p.q_lora_rank = r.integer("q_lora_rank");
  p.o_groups = r.integer("o_groups");
  p.o_lora_rank = r.integer("o_lora_rank");
  p.sliding_window = r.integer("window_size");
  p.compress_ratios = r.int_list("compress_ratios");
  p.compress_rope_theta = r.number("compress_rope_theta");
  p.rope_theta = r.number("rope_theta");
  p.original_max_position_embeddings = r.integer("original_seq_len", 0);
  p.rope_factor = r.number("rope_factor", 1);
  p.beta_fast = r.number("beta_fast", 32);
  p.beta_slow = r.number("beta_slow", 1);
  p.max_position_embeddings = r.integer("max_seq_len", 1048576);
  p.index_n_heads = r.integer("index_n_heads");
  p.index_head_dim = r.integer("index_head_dim");
  p.index_topk = r.integer("index_topk");
  p.hc_mult = r.integer("hc_mult");
  p.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters");
  p.hc_eps = r.number("hc_eps", 1e-6);
  p.rms_norm_eps = r.number("norm_eps", 1e-6);
  p.n_routed_experts = r.integer("n_routed_experts");
  p.num_experts_per_tok = r.integer("n_activated_experts");
  p.n_shared_experts = r.integer("n_shared_experts");
  p.moe_intermediate_size = r.integer("moe_inter_dim");
  p.scoring_func = parse_scoring(r, "score_func");
  p.norm_topk_prob = true;
  p.routed_scaling_factor = r.number("route_scale");
  p.swiglu_limit = r.number("swiglu_limit");
  p.num_hash_layers = r.integer("n_hash_layers");
  p.num_nextn_predict_layers = r.integer("n_mtp_layers", 1);
  p.expert_dtype = parse_expert_dtype(r, "expert_dtype");
  if (r.has("dtype") && r.string("dtype") != "fp8")
    r.fail("dtype", r.string("dtype"), "only \"fp8\" checkpoints are supported");
  if (r.has("scale_fmt") && r.string("scale_fmt") != "ue8m0")
    r.fail("scale_fmt", r.string("scale_fmt"), "only \"ue8m0\" scales are supported");
  return p;
}

}  // namespace

ModelConfig::ModelConfig(ModelParams params, std::string source)
    : p_(std::move(params)), source_(std::move(source)) {
  const ModelParams& p = p_;
  auto bad = [&](const std::string& field, const std::string& value, const std::string& rule) {
    throw ConfigError(source_ + ": field '" + field + "' = " + value + ": " + rule);
  };
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0) bad(field, std::to_string(v), "must be positive");
  };
  auto positive_real = [&](const char* field, double v) {
    if (!(v > 0) || !std::isfinite(v)) bad(field, json(v).dump(), "must be a positive finite number");
  };
  auto multiple_of = [&](const char* field, int64_t v, int64_t m, const char* why) {
    if (v % m != 0) bad(field, std::to_string(v), std::string("must be a multiple of ") + std::to_string(m) + " (" + why + ")");
  };

  positive("vocab_size", p.vocab_size);
  positive("hidden_size", p.hidden_size);
  multiple_of("hidden_size", p.hidden_size, 128, "FP8 weight blocks are 128x128");
  positive("num_hidden_layers", p.num_hidden_layers);
  positive("num_attention_heads", p.num_attention_heads);
  if (p.num_key_value_heads != 1)
    bad("num_key_value_heads", std::to_string(p.num_key_value_heads), "DeepSeek-V4 attention has exactly 1 shared KV head");
  positive("head_dim", p.head_dim);
  positive("qk_rope_head_dim", p.qk_rope_head_dim);
  if (p.qk_rope_head_dim % 2 != 0 || p.qk_rope_head_dim >= p.head_dim)
    bad("qk_rope_head_dim", std::to_string(p.qk_rope_head_dim),
        "must be even and smaller than head_dim (" + std::to_string(p.head_dim) + ")");
  positive("q_lora_rank", p.q_lora_rank);
  multiple_of("q_lora_rank", p.q_lora_rank, 128, "FP8 weight blocks are 128x128");
  positive("o_groups", p.o_groups);
  if (p.num_attention_heads % p.o_groups != 0)
    bad("o_groups", std::to_string(p.o_groups),
        "must divide num_attention_heads (" + std::to_string(p.num_attention_heads) + ")");
  positive("o_lora_rank", p.o_lora_rank);
  positive("sliding_window", p.sliding_window);
  positive_real("rope_theta", p.rope_theta);
  positive_real("compress_rope_theta", p.compress_rope_theta);
  if (p.original_max_position_embeddings < 0)
    bad("rope_scaling.original_max_position_embeddings", std::to_string(p.original_max_position_embeddings), "must not be negative");
  if (p.original_max_position_embeddings > 0) positive_real("rope_scaling.factor", p.rope_factor);
  positive("max_position_embeddings", p.max_position_embeddings);
  positive("index_n_heads", p.index_n_heads);
  positive("index_head_dim", p.index_head_dim);
  if (p.qk_rope_head_dim >= p.index_head_dim)
    bad("index_head_dim", std::to_string(p.index_head_dim),
        "must be larger than qk_rope_head_dim (" + std::to_string(p.qk_rope_head_dim) + ")");
  positive("index_topk", p.index_topk);
  positive("hc_mult", p.hc_mult);
  positive("hc_sinkhorn_iters", p.hc_sinkhorn_iters);
  positive_real("hc_eps", p.hc_eps);
  positive_real("rms_norm_eps", p.rms_norm_eps);
  positive("n_routed_experts", p.n_routed_experts);
  positive("num_experts_per_tok", p.num_experts_per_tok);
  if (p.num_experts_per_tok > p.n_routed_experts)
    bad("num_experts_per_tok", std::to_string(p.num_experts_per_tok),
        "must not exceed n_routed_experts (" + std::to_string(p.n_routed_experts) + ")");
  if (p.n_shared_experts != 1)
    bad("n_shared_experts", std::to_string(p.n_shared_experts), "DeepSeek-V4 has exactly 1 shared expert");
  positive("moe_intermediate_size", p.moe_intermediate_size);
  multiple_of("moe_intermediate_size", p.moe_intermediate_size, 128, "FP8 weight blocks are 128x128");
  positive_real("routed_scaling_factor", p.routed_scaling_factor);
  if (!(p.swiglu_limit >= 0) || !std::isfinite(p.swiglu_limit))
    bad("swiglu_limit", json(p.swiglu_limit).dump(), "must be a finite number >= 0 (0 = no clamp)");
  if (p.num_hash_layers < 0 || p.num_hash_layers > p.num_hidden_layers)
    bad("num_hash_layers", std::to_string(p.num_hash_layers),
        "must be between 0 and num_hidden_layers (" + std::to_string(p.num_hidden_layers) + ")");
  if (p.num_nextn_predict_layers < 0)
    bad("num_nextn_predict_layers", std::to_string(p.num_nextn_predict_layers), "must not be negative");
  if (p.bos_token_id < 0 || p.bos_token_id >= p.vocab_size)
    bad("bos_token_id", std::to_string(p.bos_token_id), "must be a token id below vocab_size");
  if (p.eos_token_id < 0 || p.eos_token_id >= p.vocab_size)
    bad("eos_token_id", std::to_string(p.eos_token_id), "must be a token id below vocab_size");

  const int64_t L = p.num_hidden_layers;
  const int64_t total = L + p.num_nextn_predict_layers;
  const auto n = static_cast<int64_t>(p.compress_ratios.size());
  if (n != L && n != total)
    bad("compress_ratios", json(p.compress_ratios).dump(),
        "must have one entry per layer: num_hidden_layers (" + std::to_string(L) +
            ") or num_hidden_layers + num_nextn_predict_layers (" + std::to_string(total) + "), got " +
            std::to_string(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = p.compress_ratios[static_cast<size_t>(i)];
    const std::string field = "compress_ratios[" + std::to_string(i) + "]";
    if (r != 0 && r != 4 && r != 128) bad(field, std::to_string(r), "must be 0 (SWA-only), 4 (CSA) or 128 (HCA)");
    if (i >= L && r != 0) bad(field, std::to_string(r), "the MTP layer is SWA-only: its ratio must be 0");
  }
  if (n == L) p_.compress_ratios.resize(static_cast<size_t>(total), 0);  // MTP layers are SWA-only
  for (int64_t i = 0; i < total; ++i) {
    const int64_t r = p_.compress_ratios[static_cast<size_t>(i)];
    const LayerKind k = r == 0 ? LayerKind::kSwa : (r == 4 ? LayerKind::kCsa : LayerKind::kHca);
    (i < L ? kinds_ : mtp_kinds_).push_back(k);
  }
}

int64_t ModelConfig::compress_ratio(int64_t layer) const {
  if (layer < 0 || layer >= num_layers() + num_mtp_layers())
    throw UsageError(source_ + ": layer " + std::to_string(layer) + " out of range");
  return p_.compress_ratios[static_cast<size_t>(layer)];
}

LayerKind ModelConfig::layer_kind(int64_t layer) const {
  compress_ratio(layer);  // range check
  return layer < num_layers() ? kinds_[static_cast<size_t>(layer)]
                              : mtp_kinds_[static_cast<size_t>(layer - num_layers())];
}

int64_t ModelConfig::count_layers(LayerKind kind) const {
  int64_t c = 0;
  for (LayerKind k : kinds_) c += (k == kind);
  return c;
}

json ModelConfig::to_json() const {
  const ModelParams& p = p_;
  json j = {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"vocab_size", p.vocab_size},
      {"hidden_size", p.hidden_size},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_attention_heads", p.num_attention_heads},
      {"num_key_value_heads", p.num_key_value_heads},
      {"head_dim", p.head_dim},
      {"qk_rope_head_dim", p.qk_rope_head_dim},
      {"q_lora_rank", p.q_lora_rank},
      {"o_groups", p.o_groups},
      {"o_lora_rank", p.o_lora_rank},
      {"sliding_window", p.sliding_window},
      {"compress_ratios", p.compress_ratios},
      {"compress_rope_theta", p.compress_rope_theta},
      {"rope_theta", p.rope_theta},
      {"max_position_embeddings", p.max_position_embeddings},
      {"index_n_heads", p.index_n_heads},
      {"index_head_dim", p.index_head_dim},
      {"index_topk", p.index_topk},
      {"hc_mult", p.hc_mult},
      {"hc_sinkhorn_iters", p.hc_sinkhorn_iters},
      {"hc_eps", p.hc_eps},
      {"rms_norm_eps", p.rms_norm_eps},
      {"n_routed_experts", p.n_routed_experts},
      {"num_experts_per_tok", p.num_experts_per_tok},
      {"n_shared_experts", p.n_shared_experts},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"scoring_func", scoring_name(p.scoring_func)},
      {"topk_method", "noaux_tc"},
      {"norm_topk_prob", p.norm_topk_prob},
      {"routed_scaling_factor", p.routed_scaling_factor},
      {"swiglu_limit", p.swiglu_limit},
      {"num_hash_layers", p.num_hash_layers},
      {"num_nextn_predict_layers", p.num_nextn_predict_layers},
      {"expert_dtype", p.expert_dtype == ExpertDType::kFp4 ? "fp4" : "fp8"},
      {"hidden_act", "silu"},
      {"bos_token_id", p.bos_token_id},
      {"eos_token_id", p.eos_token_id},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"quantization_config",
       {{"quant_method", "fp8"},
        {"fmt", "e4m3"},
        {"scale_fmt", "ue8m0"},
        {"activation_scheme", "dynamic"},
        {"weight_block_size", {128, 128}}}},
  };
  if (p.original_max_position_embeddings > 0)
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", p.rope_factor},
                         {"original_max_position_embeddings", p.original_max_position_embeddings},
                         {"beta_fast", p.beta_fast},
                         {"beta_slow", p.beta_slow}};
  return j;
}

ModelConfig parse_model_config(const json& j, const std::string& source) {
  const FieldReader r(j, source);
  const bool inference_style = r.has("dim") && !r.has("hidden_size");
  return ModelConfig(inference_style ? parse_inference(r) : parse_hf(r), source);
}

ModelConfig load_model_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw IoError(file.string() + ": cannot open config file");
  // The field being read, so a number the parser cannot hold (1e400) is named with its field.
  std::vector<std::string> path;
  const auto track_field = [&path](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) path.emplace_back();
    if (event == json::parse_event_t::object_end && !path.empty()) path.pop_back();
    if (event == json::parse_event_t::key && !path.empty()) path.back() = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(in, track_field);
  } catch (const json::out_of_range& e) {
    std::string field;
    for (const std::string& key : path) field += (field.empty() ? "" : ".") + key;
    const std::string what = e.what();
    const size_t quote = what.find('\'');
    const std::string value = quote == std::string::npos ? what : what.substr(quote);
    throw ConfigError(file.string() + ": field '" + field + "' = " + value +
                      ": the number is out of range (beyond a double)");
  } catch (const json::exception& e) {
    throw FormatError(file.string() + ": not valid JSON: " + e.what());
  }
  return parse_model_config(j, file.string());
}

}  // namespace dsv4
