// Cache accounting in fixed-size blocks of tokens: a pool of block ids with reference counts, and
// per-sequence block tables. The scheduler admits, grows and preempts sequences by it.
//
// The engine's shared page pool (EngineConfig::shared_cache_pool, model/cache_pool.h) names its
// pages by these ids, so a block id is where a sequence's compressed entries for those tokens live.
//
// Prefix caching (on when made so): a full block whose tokens' entries are complete can be
// registered under the hash of its tokens and of every token before it (a chain: the previous
// block's hash goes into the next). A later sequence whose tokens begin the same way finds those
// blocks (cached_prefix) and shares them (take_prefix, a reference each). A block keeps its hash
// after its last reference goes: it waits in the free list, behind the blocks without a hash, and is
// evicted (its hash forgotten) only when it is handed out again, least recently freed first and a
// sequence's later blocks before its earlier ones. A lookup compares the tokens themselves too, and
// the hashes are seeded per manager, so no crafted prompt can make one sequence read another's
// blocks by a hash collision of its own block; the chain relies on the 64-bit hash for the tokens
// before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace dsv4 {

using BlockId = int32_t;

// The blocks of one sequence, in token order: block i holds tokens [i * block_size, (i + 1) * block_size).
struct BlockTable {
  std::vector<BlockId> blocks;
  // Prefix caching: the leading blocks whose chain hash is known (registered by this sequence, or
  // found in the cache), and the hash of the last of them.
  int64_t num_hashed = 0;
  uint64_t last_hash = 0;
};

class BlockManager {
 public:
  // Throws UsageError unless both counts are positive.
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching = false);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks no sequence holds, cached ones (which a sequence may still find) included.
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // Blocks registered under a hash, held or free.
  int64_t num_cached() const { return static_cast<int64_t>(cached_.size()); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Whether `table` can be grown to hold `tokens` tokens with the free blocks.
  bool can_grow(const BlockTable& table, int64_t tokens) const;
  // Appends free blocks (reference count 1, any cached hash evicted) until `table` holds `tokens`
  // tokens. Throws UsageError when too few are free (ask can_grow first).
  void grow(BlockTable& table, int64_t tokens);
  // A second table over the same blocks (each reference count + 1).
  BlockTable share(const BlockTable& table);
  // Drops the table's references and empties it; blocks whose count reaches 0 are free again.
  void release(BlockTable& table);

  // Prefix caching: the registered blocks that hold the first full blocks of `tokens`, in order,
  // at most `max_blocks` (empty without prefix caching).
  std::vector<BlockId> cached_prefix(std::span<const int32_t> tokens, int64_t max_blocks) const;
  // The same with the blocks' chain hashes given (`hashes`, from chain_hashes, at least
  // min(max_blocks, full blocks of tokens) of them); the blocks' tokens are still compared.
  std::vector<BlockId> cached_prefix(std::span<const int32_t> tokens, std::span<const uint64_t> hashes,
                                     int64_t max_blocks) const;
  // Extends `hashes`, the chain hashes of the first full blocks of `tokens` (a block's covers its
  // tokens and all before them), to the first `blocks` (or all the full blocks there are). A
  // caller keeps them for tokens whose blocks stay as they are (a sequence's), so that a block is
  // hashed once however often it is looked up.
  void chain_hashes(std::span<const int32_t> tokens, int64_t blocks, std::vector<uint64_t>& hashes) const;
  // Whether an empty table can take `prefix` (from cached_prefix) and then grow to `tokens`.
  bool can_take(std::span<const BlockId> prefix, int64_t tokens) const;
  // Starts the empty `table` with `prefix` (a reference each; free ones leave the free list).
  // Throws UsageError for a non-empty table or a block that is not cached.
  void take_prefix(BlockTable& table, std::span<const BlockId> prefix);
  // Registers the table's full blocks within the first `computed` of `tokens` (their entries are
  // complete) that are not yet, unless a block with the same tokens is cached already. No-op
  // without prefix caching.
  void cache_full_blocks(BlockTable& table, std::span<const int32_t> tokens, int64_t computed);

  int32_t ref_count(BlockId block) const { return blocks_.at(static_cast<size_t>(block)).refs; }
  // A cached block's chain hash (the hash of its tokens and all before them).
  uint64_t chain_hash_of(BlockId block) const { return blocks_.at(static_cast<size_t>(block)).hash; }
  // The blocks grow() handed out since the last call, in order (what a KV canary poisons).
  std::vector<BlockId> take_handed_out();

 private:
  struct Block {
    int32_t refs = 0;
    bool cached = false;          // registered under `hash`
    uint64_t hash = 0;
    uint64_t parent_hash = 0;     // the hash of the tokens before the block's
    std::vector<int32_t> tokens;  // what the hash stands for (cached blocks)
    std::list<BlockId>::iterator free_at;  // where it is in free_ (refs == 0)
  };

  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  void make_free(BlockId b);
  void evict(Block& block);

  int64_t block_size_;
  bool prefix_caching_;
  uint64_t seed_;
  std::vector<Block> blocks_;
  std::list<BlockId> free_;  // handed out from the front
  std::unordered_map<uint64_t, BlockId> cached_;
  std::vector<BlockId> handed_out_;
};

}  // namespace dsv4
