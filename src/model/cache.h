// Per-sequence state across forwards (MODEL.md §4.3, §8): for every layer the SWA window of the
// last W kv rows and the compressors' partial state, which are fixed-size and the sequence's own;
// and the caches that grow with it, the compressed entries and the indexer keys, whose rows live
// in pages of a CachePool (model/cache_pool.h) listed in the sequence's block tables.
//
// The layout is part of the math every op relies on (window position p in row p % W, entry j of
// a ratio-m cache in row j % page_rows of page table[j / page_rows], state rings by position).
// A sequence made without a pool gets one of its own with one page per ratio, the contiguous
// layout; the forward's numbers do not depend on the pages (tests/model/test_paged_caches).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "config/model_config.h"
#include "model/cache_pool.h"
#include "ops/ops.h"

namespace dsv4 {

// A compressor's partial state: the last coff*m tokens' kv and score + ape rows, fp32, the token
// at position p in row p % (coff*m).
struct CompressorState {
  DeviceTensor kv;     // [coff*m, coff*dc] f32
  DeviceTensor score;  // [coff*m, coff*dc] f32
};

struct LayerCache {
  DeviceTensor window;                 // [W, d] kv rows after QAT, position p in row p % W
  CompressorState compressor;          // ratio > 0
  CompressorState index_compressor;    // CSA layers
};

// A sequence's pages of a pool, one block table per compression ratio, given back to the pool
// when the tables go (a move hands them over).
class BlockTables {
 public:
  BlockTables() = default;
  // Tables of ceil((capacity / m) / page_rows) entries per ratio m of the pool, all -1.
  BlockTables(std::shared_ptr<CachePool> pool, int64_t capacity);
  BlockTables(const BlockTables&) = delete;
  BlockTables& operator=(const BlockTables&) = delete;
  BlockTables(BlockTables&& other) noexcept;
  BlockTables& operator=(BlockTables&& other) noexcept;
  ~BlockTables();

  CachePool& pool() const { return *pool_; }
  const std::vector<int32_t>& table(int64_t ratio) const { return tables_.at(ratio); }
  // Takes pages until the entries of the first `tokens` tokens have rows.
  void reserve(int64_t tokens);

 private:
  void give_back();

  std::shared_ptr<CachePool> pool_;
  std::map<int64_t, std::vector<int32_t>> tables_;  // per ratio; -1: not taken yet
};

class SequenceCache {
 public:
  // Room for `capacity` tokens; the growing caches take pages of `pool` (which other sequences
  // may share) as the forwards reach them (reserve), and give them back when the cache goes.
  SequenceCache(Ops& ops, const ModelConfig& cfg, std::shared_ptr<CachePool> pool, int64_t capacity);
  // The same with a pool of its own in `dtype` (kBF16, or kF32 for exact-math forwards): one
  // page per ratio holding its whole capacity, the contiguous layout.
  SequenceCache(Ops& ops, const ModelConfig& cfg, int64_t capacity, DType dtype);
  // A copy would share the buffers and let two sequences overwrite each other's state.
  SequenceCache(const SequenceCache&) = delete;
  SequenceCache& operator=(const SequenceCache&) = delete;
  SequenceCache(SequenceCache&&) = default;
  SequenceCache& operator=(SequenceCache&&) = default;

  int64_t capacity() const { return capacity_; }
  // Unique among the caches this process made (moves keep it): what a recorded forward
  // (CudaGraphForward) keys on, since the buffers its kernels write are this cache's.
  uint64_t id() const { return id_; }
  DType dtype() const { return blocks_.pool().dtype(); }
  // Tokens the main model has processed (the next token's position), and the MTP layers.
  int64_t length() const { return length_; }
  int64_t mtp_length() const { return mtp_length_; }

  // Layers 0..L-1 are the main layers, L.. the MTP layers.
  LayerCache& layer(int64_t index) { return layers_.at(static_cast<size_t>(index)); }
  const LayerCache& layer(int64_t index) const { return layers_.at(static_cast<size_t>(index)); }

  // The pool of the compressed entries and indexer keys, and the sequence's block table for
  // compression ratio m: ceil((capacity / m) / page_rows) page ids in entry order, -1 where no
  // page is taken yet. Its size is fixed, so a step's plan has the same layout at every position.
  CachePool& pool() const { return blocks_.pool(); }
  const std::vector<int32_t>& block_table(int64_t ratio) const { return blocks_.table(ratio); }
  // Takes pages so that the entries of the first `tokens` (<= capacity) tokens have rows;
  // UsageError naming the counts when the pool has too few free (StepPlan calls it).
  void reserve(int64_t tokens) { blocks_.reserve(tokens); }

  // Called by the model once a forward has written the caches for n more tokens (a recorded
  // forward that was never run takes them back with a negative n).
  void advance(int64_t n) { length_ += n; }
  void advance_mtp(int64_t n) { mtp_length_ += n; }

 private:
  int64_t capacity_;
  uint64_t id_;
  int64_t length_ = 0;
  int64_t mtp_length_ = 0;
  std::vector<LayerCache> layers_;
  BlockTables blocks_;
};

}  // namespace dsv4
