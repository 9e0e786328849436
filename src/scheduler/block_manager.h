// Cache accounting in fixed-size blocks of tokens: a pool of block ids with reference counts, and
// per-sequence block tables. The scheduler admits, grows and preempts sequences by it.
//
// The blocks bound what the caches may hold: the engine's shared page pool (EngineConfig::
// shared_cache_pool, model/cache_pool.h) has as many tokens as the blocks, so what this admits
// always finds its pages, but the pages are taken in the pool's order, not named by these ids.
// Prefix caching (sharing the blocks of a common prompt prefix by hash) needs them named and is
// not here; the reference counts are what it and forked sequences will share blocks by.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4 {

using BlockId = int32_t;

// The blocks of one sequence, in token order: block i holds tokens [i * block_size, (i + 1) * block_size).
struct BlockTable {
  std::vector<BlockId> blocks;
};

class BlockManager {
 public:
  // Throws UsageError unless both are positive.
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Whether `table` can be grown to hold `tokens` tokens with the free blocks.
  bool can_grow(const BlockTable& table, int64_t tokens) const;
  // Appends fresh blocks (reference count 1) until `table` holds `tokens` tokens. Throws
  // UsageError when too few are free (ask can_grow first).
  void grow(BlockTable& table, int64_t tokens);
  // A second table over the same blocks (each reference count + 1).
  BlockTable share(const BlockTable& table);
  // Drops the table's references and empties it; blocks whose count reaches 0 are free again.
  void release(BlockTable& table);

  int32_t ref_count(BlockId block) const { return ref_counts_.at(static_cast<size_t>(block)); }

 private:
  int64_t block_size_;
  std::vector<int32_t> ref_counts_;  // per block
  std::vector<BlockId> free_;        // taken from the back
};

}  // namespace dsv4
