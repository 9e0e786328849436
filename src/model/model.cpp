// The model's top level: loading, the main forward, a single layer, and the logits.
#include "model/model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/safetensors.h"
#include "model/attention.h"
#include "model/context.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/rope.h"

namespace dsv4 {

Model::Model(Ops& ops, ModelConfig cfg, ModelWeights weights) : cfg_(std::move(cfg)), weights_(std::move(weights)) {
  for (int64_t l = 0; l < cfg_.num_layers() + cfg_.num_mtp_layers(); ++l) {
    const std::vector<float> f = layer_rope_inv_freq(cfg_, l);
    const auto half = static_cast<int64_t>(f.size());
    DeviceTensor t = ops.alloc(DType::kF32, {half});
    ops.upload(host_view(f.data(), DType::kF32, {half}), t.view());
    inv_freq_.push_back(std::move(t));
  }
}

Model Model::load(Ops& ops, const std::filesystem::path& dir, const LoadProgressFn& progress, const ExpertShare& share) {
  ModelConfig cfg = load_model_config(dir / "config.json");
  const Checkpoint checkpoint(dir);
  ModelWeights weights = load_model_weights(ops, cfg, checkpoint, progress, share);
  return Model(ops, std::move(cfg), std::move(weights));
}

Model Model::dummy(Ops& ops, ModelConfig cfg, uint64_t seed, bool share_layers, const LoadProgressFn& progress,
                   const ExpertShare& share) {
  ModelWeights weights = dummy_model_weights(ops, cfg, seed, share_layers, progress, share);
  return Model(ops, std::move(cfg), std::move(weights));
}

SequenceCache Model::new_sequence(Ops& ops, int64_t capacity, bool exact_math) const {
  return new_sequence(ops, capacity, forward_cache_dtype(exact_math));
}

SequenceCache Model::new_sequence(Ops& ops, int64_t capacity, DType cache_dtype) const {
  return SequenceCache(ops, cfg_, capacity, cache_dtype);
}

SequenceCache Model::new_sequence(Ops& ops, std::shared_ptr<CachePool> pool, int64_t capacity, PageNaming naming,
                                  std::shared_ptr<StateSlots> slots) const {
  return SequenceCache(ops, cfg_, std::move(pool), capacity, naming, std::move(slots));
}

std::shared_ptr<CachePool> Model::new_cache_pool(Ops& ops, const CachePool::PagesByRatio& pages, DType cache_dtype) const {
  return std::make_shared<CachePool>(ops, cfg_, cache_dtype, pages);
}

std::shared_ptr<StateSlots> Model::new_state_slots(Ops& ops, int64_t slots, DType cache_dtype) const {
  return std::make_shared<StateSlots>(ops, cfg_, cache_dtype, slots);
}

const LayerWeights& Model::layer_weights(int64_t layer) const {
  if (layer < cfg_.num_layers()) return weights_.layers.at(static_cast<size_t>(layer));
  return weights_.mtp.at(static_cast<size_t>(layer - cfg_.num_layers())).block;
}

void Model::run_layer(const ForwardContext& ctx, int64_t layer, DeviceTensor& streams) const {
  const LayerWeights& w = layer_weights(layer);
  const DeviceTensor& inv_freq = inv_freq_.at(static_cast<size_t>(layer));
  HcMix mix = hc_pre(ctx, w.hc_attn, streams, w.attn_norm);
  const DeviceTensor a = attention(ctx, w.attn, layer, mix.y, inv_freq);
  streams = hc_post(ctx, a, streams, mix);

  mix = hc_pre(ctx, w.hc_ffn, streams, w.ffn_norm);
  const DeviceTensor f = moe(ctx, w.ffn, layer, mix.y);
  streams = hc_post(ctx, f, streams, mix);
}

DeviceTensor Model::logits(const ForwardContext& ctx, const DeviceTensor& hidden) const {
  switch (ctx.batch.options.logits) {
    case LogitsFor::kNone: return {};
    case LogitsFor::kAllTokens: return linear(ctx, hidden, weights_.head, DType::kF32);
    case LogitsFor::kLastTokenOfSequence: {
      const auto S = static_cast<int64_t>(ctx.slices.size());
      const bool one_token_each =
          std::all_of(ctx.slices.begin(), ctx.slices.end(), [](const SeqSlice& sl) { return sl.num_tokens == 1; });
      if (one_token_each) return linear(ctx, hidden, weights_.head, DType::kF32);  // decode: every row is a last one
      DeviceTensor last = ctx.alloc(hidden.dtype(), {S, hidden.dim(1)});
      std::vector<RowCopy> copies;
      for (int64_t s = 0; s < S; ++s)
        copies.push_back({ctx.slices[s].token_begin + ctx.slices[s].num_tokens - 1, last.view(), s, 1});
      ctx.ops.copy_rows({hidden.view(), copies});
      return linear(ctx, last, weights_.head, DType::kF32);
    }
  }
  return {};
}

ForwardResult Model::forward(Ops& ops, const ForwardBatch& batch) const {
  const ForwardContext ctx(ops, cfg_, batch, /*mtp=*/false);
  const ModelParams& p = cfg_.params();
  DeviceTensor streams = ctx.alloc(ctx.act, {ctx.T, p.hc_mult, p.hidden_size});
  ops.embed({ctx.token_ids.view(), &weights_.embed, streams.view()});
  for (int64_t l = 0; l < cfg_.num_layers(); ++l) {
    ctx.observe("layers." + std::to_string(l) + ".input", streams);
    run_layer(ctx, l, streams);
  }
  ForwardResult out = head(ctx, weights_.hc_head, weights_.norm, streams, "");
  for (size_t s = 0; s < ctx.slices.size(); ++s) ctx.cache(s).advance(ctx.slices[s].num_tokens);
  return out;
}

void Model::forward_without_tokens(Ops& ops, ExpertComm& group, bool exact_math, bool mtp) const {
  const int64_t first = mtp ? cfg_.num_layers() : 0;
  const int64_t end = mtp ? cfg_.num_layers() + cfg_.num_mtp_layers() : cfg_.num_layers();
  for (int64_t l = first; l < end; ++l)
    moe_without_tokens(ops, cfg_, layer_weights(l).ffn, exact_math, group);
}

ForwardResult Model::head(const ForwardContext& ctx, const HcWeights& hc, const Weight& norm, const DeviceTensor& streams,
                          const std::string& observed_prefix) const {
  ctx.observe(observed_prefix + "hc_head.input", streams);
  ForwardResult out;
  out.final_hidden = rms_norm(ctx, hc_head(ctx, hc, streams), &norm);
  ctx.observe(observed_prefix + "final_hidden", out.final_hidden);
  out.logits = logits(ctx, out.final_hidden);
  out.streams = streams;
  return out;
}

DeviceTensor Model::forward_layer(Ops& ops, const ForwardBatch& batch, int64_t layer, const DeviceTensor& streams) const {
  if (layer < 0 || layer >= cfg_.num_layers())
    throw UsageError("forward_layer: layer " + std::to_string(layer) + " is not a main layer");
  const ForwardContext ctx(ops, cfg_, batch, /*mtp=*/false);
  const ModelParams& p = cfg_.params();
  if (streams.shape() != Shape{ctx.T, p.hc_mult, p.hidden_size} || streams.dtype() != ctx.act)
    throw UsageError("forward_layer: the streams must be " + std::string(dtype_name(ctx.act)) +
                     shape_str({ctx.T, p.hc_mult, p.hidden_size}) + ", got " +
                     std::string(dtype_name(streams.dtype())) + shape_str(streams.shape()));
  DeviceTensor out = streams;
  run_layer(ctx, layer, out);
  return out;
}

}  // namespace dsv4
