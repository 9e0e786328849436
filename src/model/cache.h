// Per-sequence state across forwards (MODEL.md §4.3, §8): for every layer the SWA window of the
// last W kv rows and the compressors' partial state, which are fixed-size and the sequence's own
// (a slot of a StateSlots, model/state_slots.h); and the caches that grow with it, the compressed
// entries and the indexer keys, whose rows live in pages of a CachePool (model/cache_pool.h)
// listed in the sequence's block tables.
//
// The layout is part of the math every op relies on (window position p in row p % W, entry j of
// a ratio-m cache in row j % page_rows of page table[j / page_rows], state rings by position).
// A sequence made without a pool gets one of its own with one page per ratio, the contiguous
// layout, and one made without state slots a set of one; the forward's numbers depend on neither
// the pages nor the slot (tests/model/test_paged_caches, test_state_slots).
//
// Pages of a shared pool are found one of two ways: taken from the pool's free lists as the
// sequence grows (PageNaming::kTakenFromPool), or named by the owner of the pool from its cache
// blocks (kNamedByBlocks: the engine's block manager, so sequences can share the pages of a common
// prompt prefix; name_pages). A sequence can then resume on a prefix whose entries are in pages it
// shares (resume_on_prefix): prefix caching.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "config/model_config.h"
#include "model/cache_pool.h"
#include "model/state_slots.h"
#include "ops/ops.h"

namespace dsv4 {

enum class PageNaming {
  kTakenFromPool,  // reserve() takes free pages; they go back to the pool with the tables
  kNamedByBlocks,  // name_pages() sets them from cache blocks; nothing is taken or given back
};

// A sequence's pages of a pool, one block table per compression ratio; pages taken from the pool
// go back to it when the tables go (a move hands them over).
class BlockTables {
 public:
  BlockTables() = default;
  // Tables of ceil((capacity / m) / page_rows) entries per ratio m of the pool, all -1.
  BlockTables(std::shared_ptr<CachePool> pool, int64_t capacity, PageNaming naming);
  BlockTables(const BlockTables&) = delete;
  BlockTables& operator=(const BlockTables&) = delete;
  BlockTables(BlockTables&& other) noexcept;
  BlockTables& operator=(BlockTables&& other) noexcept;
  ~BlockTables();

  CachePool& pool() const { return *pool_; }
  const std::vector<int32_t>& table(int64_t ratio) const { return tables_.at(ratio); }
  PageNaming naming() const { return naming_; }
  // kTakenFromPool: takes pages until the entries of the first `tokens` tokens have rows.
  // kNamedByBlocks: checks that they have (UsageError naming the first page missing).
  void reserve(int64_t tokens);
  // kNamedByBlocks: the pages of a sequence whose token i lies in cache block blocks[i / block_size]
  // (see SequenceCache::name_pages).
  void name_pages(std::span<const int32_t> blocks, int64_t block_size);

 private:
  void give_back();

  std::shared_ptr<CachePool> pool_;
  PageNaming naming_ = PageNaming::kTakenFromPool;
  std::map<int64_t, std::vector<int32_t>> tables_;  // per ratio; -1: not taken yet
};

// A copy of a sequence's own state at a position that is a multiple of every compression ratio:
// each main layer's window ring and, for ratio-4 (CSA) layers, the compressors' state rings, all
// that the forwards after that position read besides the shared entries (an HCA compressor's state
// holds only the block in progress, which is empty there). Taken after a forward that ended at that
// position (SequenceCache::snapshot), it lets another sequence with the same tokens resume there
// without recomputing anything (SequenceCache::resume_on_snapshot).
struct StateSnapshot {
  int64_t position = 0;
  std::vector<DeviceTensor> tensors;  // in SequenceCache::snapshot's order
  int64_t bytes() const;
};

class SequenceCache {
 public:
  // Room for `capacity` tokens; the growing caches live in pages of `pool` (which other sequences
  // may share), taken as the forwards reach them (reserve) and given back when the cache goes, or
  // named by the pool's owner (name_pages); the fixed-size state in a slot of `slots` (null: a
  // set of one slot of its own), held until the cache goes. UsageError when `slots` has none free
  // or does not match the pool (dtype, layers).
  SequenceCache(Ops& ops, const ModelConfig& cfg, std::shared_ptr<CachePool> pool, int64_t capacity,
                PageNaming naming = PageNaming::kTakenFromPool, std::shared_ptr<StateSlots> slots = nullptr);
  // The same with a pool of its own in `dtype` (kBF16, or kF32 for exact-math forwards): one
  // page per ratio holding its whole capacity, the contiguous layout.
  SequenceCache(Ops& ops, const ModelConfig& cfg, int64_t capacity, DType dtype);
  // A copy would share the buffers and let two sequences overwrite each other's state.
  SequenceCache(const SequenceCache&) = delete;
  SequenceCache& operator=(const SequenceCache&) = delete;
  SequenceCache(SequenceCache&&) = default;
  SequenceCache& operator=(SequenceCache&&) = default;

  // The bytes of a sequence's own fixed-size state (window rings and compressor states, every
  // layer) with caches in `dtype` (a state slot); its pages are counted by the pool.
  static int64_t fixed_bytes(const ModelConfig& cfg, DType dtype) { return StateSlots::slot_bytes(cfg, dtype); }
  // StateSnapshot::bytes() of a snapshot of a sequence with caches in `dtype`.
  static int64_t snapshot_bytes(const ModelConfig& cfg, DType dtype);

  int64_t capacity() const { return capacity_; }
  // Unique among the caches this process made (moves keep it).
  uint64_t id() const { return id_; }
  // What a forward recorded for this sequence (CudaGraphForward) depends on besides the plan's
  // values: the buffers its kernels touch (the state slot, the page pool) and the plan's layout
  // (the block tables' sizes, from the capacity). A recording keyed on it replays for any
  // sequence with the same key.
  struct GraphKey {
    uint64_t slots = 0;
    int32_t slot = 0;
    uint64_t pool = 0;
    int64_t capacity = 0;
    bool operator==(const GraphKey&) const = default;
  };
  GraphKey graph_key() const { return {slot_.slots().id(), slot_.index(), pool().id(), capacity_}; }
  // The state slot the sequence holds.
  int32_t slot() const { return slot_.index(); }
  // Copies the fixed-size state into `slot`, another slot of the same set, and gives the one it
  // held back (UsageError for a slot of another set). A serving engine keeps its running
  // sequences in the lowest slots so, and its decode steps' graph keys then depend on their
  // count alone.
  void move_state(Ops& ops, StateSlot slot);
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
  // UsageError naming the counts when the pool has too few free (StepPlan calls it). With named
  // pages, checks that they are named.
  void reserve(int64_t tokens) { blocks_.reserve(tokens); }

  // PageNaming::kNamedByBlocks: token i's entries live in the pages of cache block
  // blocks[i / block_size]. For ratio m the pool's pages must be blocks of block_size / m entries
  // (m divides block_size: page b holds the entries of block b's tokens) or of one entry (block_size
  // divides m: entry j is in the page of the block holding its last token, (j + 1) m - 1). Blocks
  // past the list leave their pages unnamed. Call it whenever the blocks grow, before the forward.
  void name_pages(std::span<const int32_t> blocks, int64_t block_size) { blocks_.name_pages(blocks, block_size); }

  // Prefix caching: makes this fresh cache (length 0, named pages) continue a prefix of `reused`
  // tokens whose compressed entries and indexer keys already fill its pages (another sequence
  // wrote them into blocks this one shares). Its length becomes `resume` (<= reused); the forwards
  // from there rebuild the window rings and compressor states, which are the sequence's own, and
  // leave the reused entries as they are (StepPlan writes no entry of the first `reused` tokens).
  // With reused - resume >= prefix_recompute_tokens(cfg) the states after `reused` tokens, and so
  // every later number, are those of a sequence that ran the whole prefix (MODEL.md §8.6).
  // `reused` must be a multiple of every compression ratio; UsageError otherwise.
  void resume_on_prefix(int64_t resume, int64_t reused);
  // The prefix this cache resumed on (0: none).
  int64_t reused_tokens() const { return reused_; }

  // A copy of the state at length() (see StateSnapshot), which must be a multiple of every
  // compression ratio (UsageError otherwise).
  StateSnapshot snapshot(Ops& ops) const;
  // Prefix caching without recomputation: resume_on_prefix(s.position, s.position), then the
  // snapshot's state copied in. `s` must come from a sequence of this model whose first
  // s.position tokens are this one's, with its entries in this cache's pages.
  void resume_on_snapshot(Ops& ops, const StateSnapshot& s);

  // Called by the model once a forward has written the caches for n more tokens (a recorded
  // forward that was never run takes them back with a negative n).
  void advance(int64_t n) { length_ += n; }
  void advance_mtp(int64_t n) { mtp_length_ += n; }

 private:
  std::vector<const DeviceTensor*> snapshot_state() const;

  int64_t capacity_;
  uint64_t id_;
  int64_t length_ = 0;
  int64_t mtp_length_ = 0;
  int64_t reused_ = 0;
  int64_t main_layers_ = 0;
  StateSlot slot_;
  std::vector<LayerCache> layers_;  // views of the slot's rows
  BlockTables blocks_;
};

// The tokens a sequence resuming on a reused prefix must recompute before its end so that its
// window rings and compressor states come out as the whole prefix leaves them, bit for bit (the
// receptive field of the window attention: MODEL.md §8.6). Layer l's kv at position p depends on
// the positions down to p - l (W - 1); after the prefix each main layer needs its last W - 1
// window rows and its compressors' last coff * m rows.
int64_t prefix_recompute_tokens(const ModelConfig& cfg);

}  // namespace dsv4
