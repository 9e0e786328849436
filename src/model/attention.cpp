// The attention block, step by step as MODEL.md §3.3-3.7 writes it.
#include "model/attention.h"

#include <cmath>
#include <string>
#include <vector>

#include "model/compressor.h"
#include "model/indexer.h"

namespace dsv4 {

namespace {

// Writes the batch's kv rows into each sequence's window ring (position p in row p % W, the
// plan's window_rows; only a sequence's last W rows are written), in one op for the batch.
void append_to_windows(const ForwardContext& ctx, int64_t layer, const DeviceTensor& kv) {
  std::vector<CacheRows> seqs;
  for (size_t s = 0; s < ctx.slices.size(); ++s)
    seqs.push_back({ctx.slices[s].token_begin, ctx.slices[s].num_tokens, ctx.window(s, layer)});
  ctx.ops.write_cache_rows({kv.view(), ctx.window_rows.view(), seqs});
}

}  // namespace

DeviceTensor attention(const ForwardContext& ctx, const AttentionWeights& w, int64_t layer, const DeviceTensor& x,
                       const DeviceTensor& inv_freq) {
  const ModelParams& p = ctx.cfg.params();
  const int64_t T = ctx.T, H = p.num_attention_heads, d = p.head_dim, r = p.qk_rope_head_dim;
  const int64_t G = p.o_groups, ratio = ctx.cfg.compress_ratio(layer);
  const auto eps = static_cast<float>(p.rms_norm_eps);

  // The layer's independent chains, one fork/join (ARCHITECTURE.md §3-4), after the projection
  // they share: x wq_a^T and x wkv^T (one input, one launch), then qr = q_norm(x wq_a^T), which
  // the Q path and the indexer's queries both read. Main: the Q path (q = qr wq_b^T, per-head
  // RMSNorm, RoPE), then the KV path (one 512-d vector per token, K and V at once; RoPE on the
  // last r dims, FP8 QAT on the rest). Side 0: the attention compressor's entries (ratio > 0).
  // Side 1: the indexer's keys (CSA). Side 2: the indexer's queries (CSA), or else the KV path.
  // In order, the tasks run exactly as the blocks read in MODEL.md, so the numbers do not depend
  // on whether a backend overlaps them. Compressed entries are written before attention reads
  // them: a block that ends inside this batch is visible to its last token.
  const auto [q_lora, kv_lora] = linear_pair(ctx, x, w.wq_a, w.wkv, ctx.act);
  const DeviceTensor qr = rms_norm(ctx, q_lora, &w.q_norm);
  DeviceTensor q, kv;
  IndexerQuery index_query;
  const auto q_path = [&] {
    q = linear(ctx, qr, w.wq_b, ctx.act).reshaped({T, H, d});
    ctx.ops.norm_rope_quant({.src = q.view(), .y = q.view(), .norm = true, .eps = eps, .positions = ctx.positions.view(),
                             .inv_freq = inv_freq.view(), .rope_dim = r});
  };
  const auto kv_path = [&] {
    kv = ctx.alloc(ctx.act, {T, d});
    NormRopeQuantParams finish{.src = kv_lora.reshaped({T, 1, d}).view(),
                               .y = kv.reshaped({T, 1, d}).view(),
                               .norm = true,
                               .norm_weight = &w.kv_norm,
                               .eps = eps,
                               .positions = ctx.positions.view(),
                               .inv_freq = inv_freq.view(),
                               .rope_dim = r};
    if (ctx.qat) finish.quant_cols = d - r, finish.quant_block = 64, finish.quant_format = QuantFormat::kE4M3;
    ctx.ops.norm_rope_quant(finish);
  };
  ForkJoinTasks chains;
  chains.chain = layer_kind_name(ctx.cfg.layer_kind(layer));
  chains.tokens = T;
  if (ratio > 0)
    chains.side[0] = [&] { compress(ctx, *w.compressor, layer, CompressorUse::kAttention, x, inv_freq); };
  if (w.indexer) {
    chains.main = [&] {
      q_path();
      kv_path();
    };
    chains.side[1] = [&] { compress(ctx, w.indexer->compressor, layer, CompressorUse::kIndexer, x, inv_freq); };
    chains.side[2] = [&] { index_query = indexer_query(ctx, *w.indexer, x, qr, inv_freq); };
  } else {
    chains.main = q_path;
    chains.side[2] = kv_path;
  }
  ctx.ops.fork_join(chains);

  // After the join, on the main stream: the indexer's scores and top-k over its keys.
  DeviceTensor topk;
  if (w.indexer) topk = indexer_topk(ctx, layer, index_query);

  std::vector<AttentionSeq> seqs;
  for (size_t s = 0; s < ctx.slices.size(); ++s)
    seqs.push_back(
        {ctx.slices[s], ctx.cache(s).layer(layer).window.view(), ratio > 0 ? ctx.compressed(s, layer) : PagedCache()});
  DeviceTensor o = ctx.alloc(ctx.act, {T, H, d});
  const auto softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  ctx.ops.sparse_attention({q.view(), kv.view(), &w.attn_sink, topk.empty() ? ConstTensorView() : ConstTensorView(topk.view()),
                            ctx.positions.view(), seqs, p.sliding_window, ratio, softmax_scale, o.view()});
  if (!topk.empty()) ctx.observe("layers." + std::to_string(layer) + ".indexer_topk", topk);

  // A second fork/join: the window ring takes the batch's kv rows once attention has read it (a
  // prefill's rows may overwrite rows its earlier tokens read), and nothing else in the layer reads
  // the ring, so the write runs beside the output. Main: undo the rotation at the query position,
  // then wo_a per group of H/G heads, then wo_b. Side 0: the window write.
  DeviceTensor out;
  ForkJoinTasks output;
  output.chain = kOutputChain;
  output.tokens = T;
  output.main = [&] {
    ctx.ops.rope({o.view(), ctx.positions.view(), inv_freq.view(), r, true});
    const int64_t R = w.wo_a.shape.at(0) / G;
    DeviceTensor z = ctx.alloc(ctx.act, {T, G, R});
    ctx.ops.grouped_linear({o.reshaped({T, G, H / G * d}).view(), &w.wo_a, z.view()});
    out = linear(ctx, z.reshaped({T, G * R}), w.wo_b, ctx.act);
  };
  output.side[0] = [&] { append_to_windows(ctx, layer, kv); };
  ctx.ops.fork_join(output);
  return out;
}

}  // namespace dsv4
