// The compressor block: fp32 kv/score projections, pooling with state (compressor_pool), then
// the entry's norm, RoPE and QAT, written into the sequences' paged caches.
#include "model/compressor.h"

#include <vector>

namespace dsv4 {

void compress(const ForwardContext& ctx, const CompressorWeights& w, int64_t layer, CompressorUse use,
              const DeviceTensor& x, const DeviceTensor& inv_freq) {
  const ModelParams& p = ctx.cfg.params();
  const int64_t m = ctx.cfg.compress_ratio(layer);
  const int64_t dc = use == CompressorUse::kAttention ? p.head_dim : p.index_head_dim;
  const int64_t r = p.qk_rope_head_dim;

  // kv_t = x_t @ wkv^T, score_t = x_t @ wgate^T, both fp32 from the fp32 values of x (OFF).
  const auto [kv, score] = linear_pair(ctx, x, w.wkv, w.wgate, DType::kF32);

  // Each sequence owns compressor_block_rows(n, m) rows of the pooled entries (the plan's layout):
  // the blocks it completes, then zeros.
  std::vector<CompressorSeq> seqs;
  std::vector<CacheRows> writes;
  int64_t entries = 0;
  for (size_t s = 0; s < ctx.slices.size(); ++s) {
    const SeqSlice& sl = ctx.slices[s];
    LayerCache& cache = ctx.cache(s).layer(layer);
    CompressorState& state = use == CompressorUse::kAttention ? cache.compressor : cache.index_compressor;
    const int64_t rows = compressor_block_rows(sl.num_tokens, m);
    seqs.push_back({sl, state.kv.view(), state.score.view(), entries});
    writes.push_back(
        {entries, rows, use == CompressorUse::kAttention ? ctx.compressed(s, layer) : ctx.index_keys(s, layer)});
    entries += rows;
  }
  DeviceTensor pooled = ctx.alloc(DType::kF32, {entries, dc});
  ctx.ops.compressor_pool({kv.view(), score.view(), &w.ape, m, ctx.positions.view(), seqs, pooled.view()});

  // The pooled entry is stored in the activation dtype before its norm (OFF: norm(kv.to(bf16))).
  DeviceTensor entry = ctx.alloc(ctx.act, {entries, dc});
  const DeviceTensor positions = ctx.field(ctx.plan.entry_positions(m));
  NormRopeQuantParams finish{.src = pooled.reshaped({entries, 1, dc}).view(),
                             .y = entry.reshaped({entries, 1, dc}).view(),
                             .norm = true,
                             .norm_weight = &w.norm,
                             .eps = static_cast<float>(p.rms_norm_eps),
                             .positions = positions.view(),
                             .inv_freq = inv_freq.view(),
                             .rope_dim = r};
  if (use == CompressorUse::kIndexer) {
    finish.hadamard = true;
    if (ctx.qat) finish.quant_cols = dc, finish.quant_block = 32, finish.quant_format = QuantFormat::kE2M1;
  } else if (ctx.qat) {
    finish.quant_cols = dc - r, finish.quant_block = 64, finish.quant_format = QuantFormat::kE4M3;
  }
  ctx.ops.norm_rope_quant(finish);
  ctx.ops.write_cache_rows({entry.view(), ctx.field(ctx.plan.entry_rows(m)).view(), writes});
}

}  // namespace dsv4
