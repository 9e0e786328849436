// The indexer block's query side: queries through wq_b/RoPE/Hadamard/FP4, scores and top-k through
// indexer_topk over the keys its compressor wrote (the attention layer runs that compressor).
#include "model/indexer.h"

#include <cmath>
#include <vector>

namespace dsv4 {

DeviceTensor indexer_topk(const ForwardContext& ctx, const IndexerWeights& w, int64_t layer, const DeviceTensor& x,
                          const DeviceTensor& qr, const DeviceTensor& inv_freq) {
  const ModelParams& p = ctx.cfg.params();
  const int64_t T = ctx.T, heads = p.index_n_heads, dh = p.index_head_dim;

  DeviceTensor q = linear(ctx, qr, w.wq_b, ctx.act).reshaped({T, heads, dh});
  ctx.ops.rope({q.view(), ctx.positions.view(), inv_freq.view(), p.qk_rope_head_dim, false});
  const DeviceTensor q_rows = q.reshaped({T * heads, dh});
  ctx.ops.hadamard({q_rows.view()});
  if (ctx.qat) ctx.ops.quant_sim({q_rows.view(), dh, 32, QuantFormat::kE2M1});

  const DeviceTensor weights = linear(ctx, x, w.weights_proj, ctx.act);
  const auto weight_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh * heads)));

  std::vector<IndexerSeq> seqs;
  for (size_t s = 0; s < ctx.slices.size(); ++s) seqs.push_back({ctx.slices[s], ctx.index_keys(s, layer)});
  DeviceTensor topk = ctx.alloc(DType::kI32, {T, p.index_topk});
  ctx.ops.indexer_topk({q.view(), weights.view(), weight_scale, ctx.cfg.compress_ratio(layer), ctx.positions.view(), seqs,
                        topk.view()});
  return topk;
}

}  // namespace dsv4
