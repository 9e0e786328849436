// The lightning indexer's two halves: indexer_query (wq_b, RoPE, Hadamard, FP4 QAT, the per-head
// weights) and indexer_topk (scores and top-k over the keys its compressor wrote; the attention
// layer runs that compressor).
#include "model/indexer.h"

#include <cmath>
#include <vector>

namespace dsv4 {

IndexerQuery indexer_query(const ForwardContext& ctx, const IndexerWeights& w, const DeviceTensor& x,
                           const DeviceTensor& qr, const DeviceTensor& inv_freq) {
  const ModelParams& p = ctx.cfg.params();
  const int64_t T = ctx.T, heads = p.index_n_heads, dh = p.index_head_dim;

  DeviceTensor q = linear(ctx, qr, w.wq_b, ctx.act).reshaped({T, heads, dh});
  NormRopeQuantParams finish{.src = q.view(), .y = q.view(), .positions = ctx.positions.view(),
                             .inv_freq = inv_freq.view(), .rope_dim = p.qk_rope_head_dim, .hadamard = true};
  if (ctx.qat) finish.quant_cols = dh, finish.quant_block = 32, finish.quant_format = QuantFormat::kE2M1;
  ctx.ops.norm_rope_quant(finish);
  return {q, linear(ctx, x, w.weights_proj, ctx.act)};
}

DeviceTensor indexer_topk(const ForwardContext& ctx, int64_t layer, const IndexerQuery& query) {
  const ModelParams& p = ctx.cfg.params();
  const auto weight_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.index_head_dim * p.index_n_heads)));
  std::vector<IndexerSeq> seqs;
  for (size_t s = 0; s < ctx.slices.size(); ++s) seqs.push_back({ctx.slices[s], ctx.index_keys(s, layer)});
  DeviceTensor topk = ctx.alloc(DType::kI32, {ctx.T, p.index_topk});
  ctx.ops.indexer_topk({query.q.view(), query.weights.view(), weight_scale, ctx.cfg.compress_ratio(layer),
                        ctx.positions.view(), seqs, topk.view()});
  return topk;
}

}  // namespace dsv4
