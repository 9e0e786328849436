// The page pools of the caches that grow with a sequence (MODEL.md §8): per layer, the compressed
// entries (ratio > 0) and the indexer keys (CSA layers), each [num_pages, page_rows, width] in the
// cache dtype. Sequences (model/cache.h) take pages as they grow and give them back when they
// end; a sequence lists its pages in a block table, which the forward's plan carries to the ops
// (ops.h PagedCache). This is the storage a block manager with prefix caching can hand out.
//
// Pages are handed out per compression ratio, not per layer: page id p is page p of the pool of
// every layer of that ratio, and for ratio 4 of the indexer-key pools too (a CSA layer has as many
// keys as entries). So one block table per ratio serves all of a sequence's layers, as one table
// per KV-cache group does in vLLM, and a step's plan carries one table per sequence and ratio.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "ops/ops.h"

namespace dsv4 {

// Fills `t` (bf16 or f32) with quiet NaN (bf16 0x7FC0, f32 0x7FC00000), or a packed cache's u8
// with 0xFF (NaN in every field of kv/packed_entries.h): the KV canary's value, a row read before
// it is written shows in the output.
void fill_nan(Ops& ops, TensorView t);

// The dtype of the rows a forward caches: kF32 in exact math, else kBF16.
inline DType forward_cache_dtype(bool exact_math) { return exact_math ? DType::kF32 : DType::kBF16; }

// Why the model's caches cannot take cache dtype `dtype` on `ops`, or "" when they can: kBF16 or
// kF32 rows, or kF8E4M3, the packed entries of kv/packed_entries.h (which need DeepSeek-V4's head
// dims and a backend that reads them).
std::string cache_dtype_refusal(const Ops& ops, const ModelConfig& cfg, DType dtype);
// UsageError with cache_dtype_refusal's reason, if any.
void check_cache_dtype(const Ops& ops, const ModelConfig& cfg, DType dtype);
// The default numerics' cache dtype when none is asked for (`--kv-cache-dtype auto`): the packed
// entries where the backend reads them and the model has their dims, else bf16 rows.
DType auto_cache_dtype(const Ops& ops, const ModelConfig& cfg);

class CachePool {
 public:
  // The pages of one compression ratio's pools.
  struct Pages {
    int64_t page_rows = 0;  // entries per page
    int64_t num_pages = 0;
  };
  using PagesByRatio = std::map<int64_t, Pages>;

  // Pools for every compressed layer of cfg (main and MTP) in cache dtype `dtype` (kBF16, kF32
  // for exact-math forwards, or kF8E4M3: u8 pools of packed entries, kv/packed_entries.h);
  // `pages` names every compression ratio of the model. UsageError otherwise, or for page counts
  // that do not fit i32 page ids.
  CachePool(Ops& ops, const ModelConfig& cfg, DType dtype, const PagesByRatio& pages);
  CachePool(const CachePool&) = delete;
  CachePool& operator=(const CachePool&) = delete;

  // Enough pages of `page_rows` entries for `sequences` sequences of up to `capacity` tokens each.
  static PagesByRatio pages_for(const ModelConfig& cfg, int64_t sequences, int64_t capacity, int64_t page_rows);
  // The engine's layout (pages named by cache blocks): per ratio m, one page per block of
  // max(1, block_size / m) entries.
  static PagesByRatio per_block(const ModelConfig& cfg, int64_t num_blocks, int64_t block_size);
  // The bytes of one block's pages in that layout, every layer's pools (compressed entries and
  // indexer keys) in `dtype`.
  static int64_t block_bytes(const ModelConfig& cfg, DType dtype, int64_t block_size);
  // One page per ratio holding all of one sequence's capacity / m entries: the contiguous layout
  // (page_rows at least 1, and no page when the capacity completes no entry).
  static PagesByRatio one_sequence(const ModelConfig& cfg, int64_t capacity);

  // Unique among the pools this process made.
  uint64_t id() const { return id_; }
  DType dtype() const { return dtype_; }
  const PagesByRatio& pages() const { return pages_; }
  // The pages of `ratio`, one of the model's compression ratios (UsageError otherwise).
  const Pages& pages(int64_t ratio) const;
  int64_t free_pages(int64_t ratio) const;

  // Layers the pools were made for (main, then MTP).
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Layer `layer`'s pools: [num_pages, page_rows, head_dim] compressed entries (ratio > 0) and
  // [num_pages, page_rows, index_head_dim] indexer keys (CSA layers), the widths packed ones'
  // bytes for fp8 (kv/packed_entries.h cache_stored_width); empty for other layers.
  const DeviceTensor& compressed(int64_t layer) const { return layers_.at(static_cast<size_t>(layer)).compressed; }
  const DeviceTensor& index_keys(int64_t layer) const { return layers_.at(static_cast<size_t>(layer)).index_keys; }

  // Takes n free pages of `ratio`; UsageError naming the counts when fewer are free. Thread-safe.
  std::vector<int32_t> take(int64_t ratio, int64_t n);
  // Returns pages taken from `ratio`; they are taken again last-in first-out.
  void give_back(int64_t ratio, std::span<const int32_t> pages);

  // Fills the ratio-`ratio` pages `pages` of every layer's pools with NaN (a KV canary: a forward
  // that reads a row of a page before writing it, a previous owner's row, shows NaN in its output).
  void poison(Ops& ops, int64_t ratio, std::span<const int32_t> pages) const;

 private:
  struct LayerPools {
    int64_t ratio = 0;  // the layer's compression ratio (0: no pools)
    DeviceTensor compressed;
    DeviceTensor index_keys;
  };

  uint64_t id_;
  DType dtype_;
  PagesByRatio pages_;
  std::vector<LayerPools> layers_;  // main layers, then MTP layers
  mutable std::mutex mutex_;
  std::map<int64_t, std::vector<int32_t>> free_;  // per ratio, taken from the back
};

}  // namespace dsv4
