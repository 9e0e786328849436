// Allocation of a sequence's per-layer caches, sized from the config and the capacity.
#include "model/cache.h"

#include <atomic>

#include "core/error.h"

namespace dsv4 {

namespace {

std::atomic<uint64_t> next_cache_id{1};

CompressorState make_state(Ops& ops, int64_t ratio, int64_t dc) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  return {ops.alloc(DType::kF32, {coff * ratio, coff * dc}), ops.alloc(DType::kF32, {coff * ratio, coff * dc})};
}

}  // namespace

SequenceCache::SequenceCache(Ops& ops, const ModelConfig& cfg, int64_t capacity, DType dtype)
    : capacity_(capacity), id_(next_cache_id++), dtype_(dtype) {
  if (capacity <= 0) throw UsageError("a sequence needs a positive capacity, got " + std::to_string(capacity));
  // Positions past max_position_embeddings are refused by the forward, so such a cache could
  // never be filled; refusing it here also keeps a typo from becoming a huge allocation.
  if (capacity > cfg.params().max_position_embeddings)
    throw UsageError("a sequence of " + std::to_string(capacity) + " tokens is longer than the model's " +
                     "max_position_embeddings (" + std::to_string(cfg.params().max_position_embeddings) + ")");
  if (dtype != DType::kBF16 && dtype != DType::kF32)
    throw UsageError("sequence caches hold bf16 or f32, not " + std::string(dtype_name(dtype)));
  const ModelParams& p = cfg.params();
  const int64_t d = p.head_dim, dh = p.index_head_dim;
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l) {
    LayerCache c;
    c.window = ops.alloc(dtype, {p.sliding_window, d});
    const int64_t m = cfg.compress_ratio(l);
    if (m > 0) {
      c.compressed = ops.alloc(dtype, {capacity / m, d});
      c.compressor = make_state(ops, m, d);
    }
    if (cfg.layer_kind(l) == LayerKind::kCsa) {
      c.index_keys = ops.alloc(dtype, {capacity / m, dh});
      c.index_compressor = make_state(ops, m, dh);
    }
    layers_.push_back(std::move(c));
  }
}

}  // namespace dsv4
