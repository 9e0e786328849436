// The compressor block: fp32 kv/score projections, pooling with state (compressor_pool), then
// the entry's norm, RoPE and QAT, written into the sequences' caches.
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
  const DeviceTensor kv = linear(ctx, x, w.wkv, DType::kF32);
  const DeviceTensor score = linear(ctx, x, w.wgate, DType::kF32);

  // Each sequence completes the blocks first_block .. first_block + count - 1.
  std::vector<CompressorSeq> seqs;
  std::vector<int64_t> first_block;
  std::vector<int32_t> entry_positions;
  int64_t entries = 0;
  for (size_t s = 0; s < ctx.slices.size(); ++s) {
    const SeqSlice& sl = ctx.slices[s];
    LayerCache& cache = ctx.cache(s).layer(layer);
    CompressorState& state = use == CompressorUse::kAttention ? cache.compressor : cache.index_compressor;
    const int64_t first = sl.start_pos / m, end = (sl.start_pos + sl.num_tokens) / m;
    seqs.push_back({sl, state.kv.view(), state.score.view(), entries});
    first_block.push_back(first);
    for (int64_t j = first; j < end; ++j) entry_positions.push_back(static_cast<int32_t>(j * m));
    entries += end - first;
  }
  DeviceTensor pooled = ctx.alloc(DType::kF32, {entries, dc});
  ctx.ops.compressor_pool({kv.view(), score.view(), &w.ape, m, seqs, pooled.view()});
  if (entries == 0) return;

  // The pooled entry is stored in the activation dtype before its norm (OFF: norm(kv.to(bf16))).
  DeviceTensor entry = ctx.alloc(ctx.act, {entries, dc});
  ctx.ops.copy({pooled.view(), entry.view()});
  entry = rms_norm(ctx, entry, &w.norm);
  DeviceTensor positions = ctx.alloc(DType::kI32, {entries});
  ctx.ops.upload(ConstTensorView(reinterpret_cast<const std::byte*>(entry_positions.data()), DType::kI32, {entries}),
                 positions.view());
  ctx.ops.rope({entry.reshaped({entries, 1, dc}).view(), positions.view(), inv_freq.view(), r, false});
  if (use == CompressorUse::kIndexer) {
    ctx.ops.hadamard({entry.view()});
    if (ctx.qat) ctx.ops.quant_sim({entry.view(), dc, 32, QuantFormat::kE2M1});
  } else if (ctx.qat) {
    ctx.ops.quant_sim({entry.view(), dc - r, 64, QuantFormat::kE4M3});
  }

  std::vector<RowCopy> copies;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t begin = seqs[s].out_begin;
    const int64_t end = s + 1 < seqs.size() ? seqs[s + 1].out_begin : entries;
    if (begin == end) continue;
    LayerCache& cache = ctx.cache(s).layer(layer);
    const DeviceTensor& dst = use == CompressorUse::kAttention ? cache.compressed : cache.index_keys;
    copies.push_back({begin, dst.view(), first_block[s], end - begin});
  }
  ctx.ops.copy_rows({entry.view(), copies});
}

}  // namespace dsv4
