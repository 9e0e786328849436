// Loading the checkpoint (or dummy values) into ModelWeights: names and formats from
// expected_tensors, checks by the Checkpoint, conversion by the backend.
#include "model/model_weights.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/dummy_random.h"
#include "loader/synthetic_weights.h"
#include "loader/weights.h"

namespace dsv4 {

namespace {

// "X.weight" -> "X.scale", the block scales of an FP8 or MXFP4 weight.
std::string scale_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() < suffix.size() ||
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw TensorError("quantised tensor '" + weight_name + "' does not end in .weight");
  return weight_name.substr(0, weight_name.size() - suffix.size()) + ".scale";
}

// Hands out the model's weights by name: each is looked up in expected_tensors (its format,
// dtype and shape; FP8 and MXFP4 weights with their ".scale" entry) and made by `make`, from a
// checkpoint or as dummy values.
class WeightReader {
 public:
  using Maker = std::function<Weight(const ExpectedTensor& weight, const ExpectedTensor* scale)>;
  // `origin` names where the weights come from in errors (the checkpoint's path, "dummy weights").
  // Of the routed experts, only `share`'s tensors are expected (asking for another's throws).
  WeightReader(const ModelConfig& cfg, const ExpertShare& share, std::string origin, Maker make,
               const LoadProgressFn& progress)
      : origin_(std::move(origin)), make_(std::move(make)), progress_fn_(progress) {
    check_expert_share(cfg, share);
    const std::vector<std::string> others = other_ranks_experts(cfg, share);
    for (ExpectedTensor& e : expected_tensors(cfg)) {
      const bool theirs = std::any_of(others.begin(), others.end(), [&](const std::string& prefix) {
        return e.spec.name.starts_with(prefix);
      });
      if (theirs) continue;
      progress_.bytes_total += stored_bytes(e);
      expected_.emplace(e.spec.name, std::move(e));
    }
    progress_.tensors_total = expected_.size();
  }

  Weight get(const std::string& name) const {
    const ExpectedTensor& e = expected(name);
    const ExpectedTensor* scale = e.format == WeightFormat::kPlain ? nullptr : &expected(scale_of(name));
    Weight w = make_(e, scale);
    progress_.tensors_done += scale != nullptr ? 2 : 1;
    progress_.bytes_done += stored_bytes(e) + (scale != nullptr ? stored_bytes(*scale) : 0);
    if (progress_fn_) progress_fn_(progress_);
    return w;
  }
  bool expects(const std::string& name) const { return expected_.count(name) != 0; }

 private:
  const ExpectedTensor& expected(const std::string& name) const {
    auto it = expected_.find(name);
    if (it == expected_.end())
      throw TensorError(origin_ + ": the model needs tensor '" + name + "', which the configuration does not define");
    return it->second;
  }

  // The name prefixes of the routed experts other ranks hold ("layers.3.ffn.experts.17.").
  static std::vector<std::string> other_ranks_experts(const ModelConfig& cfg, const ExpertShare& share) {
    std::vector<std::string> prefixes;
    if (share.all()) return prefixes;
    const int64_t E = cfg->n_routed_experts, first = share.first(E), last = first + share.count(E);
    for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l)
      for (int64_t e = 0; e < E; ++e)
        if (e < first || e >= last) prefixes.push_back(layer_prefix(cfg, l) + "ffn.experts." + std::to_string(e) + ".");
    return prefixes;
  }

  static uint64_t stored_bytes(const ExpectedTensor& e) {
    return static_cast<uint64_t>(shape_numel(e.spec.shape)) * dtype_size(e.spec.dtype);
  }

  std::string origin_;
  Maker make_;
  const LoadProgressFn& progress_fn_;
  mutable LoadProgress progress_;
  std::map<std::string, ExpectedTensor> expected_;
};

HcWeights read_hc(const WeightReader& r, const std::string& prefix) {
  return {r.get(prefix + "_fn"), r.get(prefix + "_base"), r.get(prefix + "_scale")};
}

CompressorWeights read_compressor(const WeightReader& r, const std::string& prefix) {
  return {r.get(prefix + "wkv.weight"), r.get(prefix + "wgate.weight"), r.get(prefix + "ape"),
          r.get(prefix + "norm.weight")};
}

ExpertLinears read_expert(const WeightReader& r, const std::string& prefix) {
  return {r.get(prefix + "w1.weight"), r.get(prefix + "w2.weight"), r.get(prefix + "w3.weight")};
}

LayerWeights read_layer(const WeightReader& r, const ModelConfig& cfg, const ExpertShare& share, int64_t layer) {
  const std::string p = layer_prefix(cfg, layer);
  LayerWeights w;
  w.attn_norm = r.get(p + "attn_norm.weight");
  w.ffn_norm = r.get(p + "ffn_norm.weight");
  w.hc_attn = read_hc(r, p + "hc_attn");
  w.hc_ffn = read_hc(r, p + "hc_ffn");

  const std::string a = p + "attn.";
  AttentionWeights& at = w.attn;
  at.wq_a = r.get(a + "wq_a.weight");
  at.q_norm = r.get(a + "q_norm.weight");
  at.wq_b = r.get(a + "wq_b.weight");
  at.wkv = r.get(a + "wkv.weight");
  at.kv_norm = r.get(a + "kv_norm.weight");
  at.wo_a = r.get(a + "wo_a.weight");
  at.wo_b = r.get(a + "wo_b.weight");
  at.attn_sink = r.get(a + "attn_sink");
  if (cfg.compress_ratio(layer) > 0) at.compressor = read_compressor(r, a + "compressor.");
  if (cfg.layer_kind(layer) == LayerKind::kCsa)
    at.indexer = IndexerWeights{r.get(a + "indexer.wq_b.weight"), r.get(a + "indexer.weights_proj.weight"),
                                read_compressor(r, a + "indexer.compressor.")};

  const std::string f = p + "ffn.";
  MoeWeights& moe = w.ffn;
  moe.gate = r.get(f + "gate.weight");
  if (r.expects(f + "gate.bias")) moe.bias = r.get(f + "gate.bias");
  if (r.expects(f + "gate.tid2eid")) moe.tid2eid = r.get(f + "gate.tid2eid");
  const bool hash = layer < cfg.num_layers() && cfg.is_hash_layer(layer);
  if (hash != moe.tid2eid.has_value() || hash == moe.bias.has_value())
    throw TensorError(p + "ffn.gate: a " + std::string(hash ? "hash" : "score") + "-routed layer needs " +
                      (hash ? "tid2eid and no bias" : "a bias and no tid2eid"));
  moe.first_expert = share.first(cfg->n_routed_experts);
  for (int64_t e = moe.first_expert; e < moe.first_expert + share.count(cfg->n_routed_experts); ++e)
    moe.experts.push_back(read_expert(r, f + "experts." + std::to_string(e) + "."));
  moe.shared = read_expert(r, f + "shared_experts.");
  return w;
}

ModelWeights read_model(const WeightReader& r, const ModelConfig& cfg, const ExpertShare& share) {
  ModelWeights w;
  w.embed = r.get("embed.weight");
  w.head = r.get("head.weight");
  w.norm = r.get("norm.weight");
  w.hc_head = read_hc(r, "hc_head");
  for (int64_t l = 0; l < cfg.num_layers(); ++l) w.layers.push_back(read_layer(r, cfg, share, l));
  for (int64_t i = 0; i < cfg.num_mtp_layers(); ++i) {
    const int64_t layer = cfg.num_layers() + i;
    const std::string p = layer_prefix(cfg, layer);
    MtpWeights m;
    m.e_proj = r.get(p + "e_proj.weight");
    m.h_proj = r.get(p + "h_proj.weight");
    m.enorm = r.get(p + "enorm.weight");
    m.hnorm = r.get(p + "hnorm.weight");
    m.norm = r.get(p + "norm.weight");
    m.hc_head = read_hc(r, p + "hc_head");
    m.block = read_layer(r, cfg, share, layer);
    w.mtp.push_back(std::move(m));
  }
  return w;
}

}  // namespace

void check_expert_share(const ModelConfig& cfg, const ExpertShare& share) {
  const int64_t E = cfg->n_routed_experts;
  if (share.ranks < 1 || share.rank < 0 || share.rank >= share.ranks)
    throw UsageError("expert share: rank " + std::to_string(share.rank) + " of " + std::to_string(share.ranks) +
                     " ranks (a rank in [0, ranks) of at least one)");
  if (E % share.ranks != 0)
    throw UsageError("expert share: the model's " + std::to_string(E) + " routed experts (n_routed_experts) do not split over " +
                     std::to_string(share.ranks) + " ranks");
}

ModelWeights load_model_weights(Ops& ops, const ModelConfig& cfg, const Checkpoint& checkpoint,
                                const LoadProgressFn& progress, const ExpertShare& share) {
  const WeightReader r(cfg, share, checkpoint.path().string(), [&](const ExpectedTensor& e, const ExpectedTensor* scale) {
    LoadWeightParams p;
    p.name = e.spec.name;
    p.format = e.format;
    p.weight = checkpoint.get(e.spec.name, e.spec.dtype, e.spec.shape);
    if (scale != nullptr) p.scale = checkpoint.get(scale->spec.name, scale->spec.dtype, scale->spec.shape);
    return ops.load_weight(p);
  }, progress);
  return read_model(r, cfg, share);
}

// Linears and the embedding (the bulk of the bytes) are made by the backend where they live, with
// the spread synthetic_weights.h gives them; the small tensors whose values shape the network
// (norms, mHC mixes, sinks, routing tables) are synthesised on the host as make-model would.
ModelWeights dummy_model_weights(Ops& ops, const ModelConfig& cfg, uint64_t seed, bool share_layers,
                                 const LoadProgressFn& progress, const ExpertShare& share) {
  // The main layer whose weights layer l takes: itself, or with share_layers the first of its kind.
  const auto source_layer = [&](int64_t l) {
    if (!share_layers) return l;
    for (int64_t s = 0; s < l; ++s)
      if (cfg.layer_kind(s) == cfg.layer_kind(l) && cfg.is_hash_layer(s) == cfg.is_hash_layer(l)) return s;
    return l;
  };
  const auto make = [&](const ExpectedTensor& e) {
    const TensorSpec& spec = e.spec;
    const std::optional<float> linear_std = linear_weight_std(e);
    if (!linear_std) {
      const SyntheticTensor t = synthesize_tensor(cfg, e, seed);
      return ops.load_weight({spec.name, WeightFormat::kPlain, t.data.view(), ConstTensorView()});
    }
    DummyWeightParams p;
    p.name = spec.name;
    p.format = e.format;
    p.dtype = DType::kBF16;
    p.shape = spec.shape;
    if (e.format == WeightFormat::kMxfp4) p.shape[1] *= 2;  // the packed FP4 pairs' logical width
    p.key = counter_key(seed, spec.name);
    p.std = *linear_std;
    return ops.dummy_weight(p);
  };
  std::map<std::string, Weight> made;  // with share_layers: the main layers' weights by name
  const WeightReader r(cfg, share, "dummy weights", [&](const ExpectedTensor& e, const ExpectedTensor*) {
    for (int64_t l = 0; share_layers && l < cfg.num_layers(); ++l) {
      const std::string prefix = layer_prefix(cfg, l);
      if (e.spec.name.rfind(prefix, 0) != 0) continue;
      const std::string source = layer_prefix(cfg, source_layer(l)) + e.spec.name.substr(prefix.size());
      if (const auto it = made.find(source); it != made.end()) return it->second;
      return made.emplace(e.spec.name, make(e)).first->second;
    }
    return make(e);
  }, progress);
  return read_model(r, cfg, share);
}

}  // namespace dsv4
