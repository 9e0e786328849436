// BlockManager: a free list and reference counts over block ids, and the hash index of the
// cached blocks for prefix caching.
#include "scheduler/block_manager.h"

#include <algorithm>
#include <random>
#include <string>

#include "core/error.h"

namespace dsv4 {

namespace {

// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), seed_(std::random_device{}()) {
  if (num_blocks <= 0 || block_size <= 0)
    throw UsageError("BlockManager: " + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                     " tokens: both must be positive");
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (BlockId b = 0; b < num_blocks; ++b) blocks_[static_cast<size_t>(b)].free_at = free_.insert(free_.end(), b);
}

uint64_t BlockManager::chain_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  uint64_t h = mix(seed_ ^ parent);
  for (const int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

bool BlockManager::can_grow(const BlockTable& table, int64_t tokens) const {
  return blocks_for(tokens) - static_cast<int64_t>(table.blocks.size()) <= num_free();
}

void BlockManager::evict(Block& block) {
  cached_.erase(block.hash);
  block.cached = false;
  block.tokens.clear();
}

void BlockManager::grow(BlockTable& table, int64_t tokens) {
  if (!can_grow(table, tokens))
    throw UsageError("BlockManager::grow: " + std::to_string(tokens) + " tokens need " +
                     std::to_string(blocks_for(tokens)) + " blocks, the table has " +
                     std::to_string(table.blocks.size()) + " and " + std::to_string(num_free()) + " are free");
  while (static_cast<int64_t>(table.blocks.size()) < blocks_for(tokens)) {
    const BlockId b = free_.front();
    free_.pop_front();
    Block& block = blocks_[static_cast<size_t>(b)];
    if (block.cached) evict(block);
    block.refs = 1;
    table.blocks.push_back(b);
    handed_out_.push_back(b);
  }
}

std::vector<BlockId> BlockManager::take_handed_out() {
  std::vector<BlockId> out;
  out.swap(handed_out_);
  return out;
}

BlockTable BlockManager::share(const BlockTable& table) {
  for (BlockId b : table.blocks) ++blocks_.at(static_cast<size_t>(b)).refs;
  return table;
}

// Blocks without a hash go first; cached ones wait at the back, the least recently freed nearest
// the front.
void BlockManager::make_free(BlockId b) {
  Block& block = blocks_[static_cast<size_t>(b)];
  block.free_at = free_.insert(block.cached ? free_.end() : free_.begin(), b);
}

void BlockManager::release(BlockTable& table) {
  // Later blocks first, so they reach the free list's front before the earlier ones: a prefix is
  // only found from its start, so its end is the part to evict first.
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
    Block& block = blocks_.at(static_cast<size_t>(*it));
    if (block.refs <= 0) throw UsageError("BlockManager::release: block " + std::to_string(*it) + " is not in use");
    if (--block.refs == 0) make_free(*it);
  }
  table = BlockTable{};
}

std::vector<BlockId> BlockManager::cached_prefix(std::span<const int32_t> tokens, int64_t max_blocks) const {
  std::vector<uint64_t> hashes;
  if (prefix_caching_) chain_hashes(tokens, max_blocks, hashes);
  return cached_prefix(tokens, hashes, max_blocks);
}

std::vector<BlockId> BlockManager::cached_prefix(std::span<const int32_t> tokens, std::span<const uint64_t> hashes,
                                                 int64_t max_blocks) const {
  std::vector<BlockId> found;
  if (!prefix_caching_) return found;
  const auto bs = static_cast<size_t>(block_size_);
  uint64_t parent = 0;
  for (size_t i = 0; static_cast<int64_t>(i) < max_blocks && (i + 1) * bs <= tokens.size(); ++i) {
    if (i >= hashes.size())
      throw UsageError("BlockManager::cached_prefix: " + std::to_string(hashes.size()) + " chain hashes for block " +
                       std::to_string(i));
    const std::span<const int32_t> own = tokens.subspan(i * bs, bs);
    const uint64_t h = hashes[i];
    const auto it = cached_.find(h);
    if (it == cached_.end()) break;
    const Block& block = blocks_[static_cast<size_t>(it->second)];
    if (block.parent_hash != parent || !std::equal(own.begin(), own.end(), block.tokens.begin(), block.tokens.end()))
      break;
    found.push_back(it->second);
    parent = h;
  }
  return found;
}

void BlockManager::chain_hashes(std::span<const int32_t> tokens, int64_t blocks, std::vector<uint64_t>& hashes) const {
  const auto bs = static_cast<size_t>(block_size_);
  const size_t want = std::min(static_cast<size_t>(std::max<int64_t>(blocks, 0)), tokens.size() / bs);
  for (size_t i = hashes.size(); i < want; ++i)
    hashes.push_back(chain_hash(i == 0 ? 0 : hashes[i - 1], tokens.subspan(i * bs, bs)));
}

bool BlockManager::can_take(std::span<const BlockId> prefix, int64_t tokens) const {
  const auto revived = std::count_if(prefix.begin(), prefix.end(),
                                     [this](BlockId b) { return blocks_.at(static_cast<size_t>(b)).refs == 0; });
  return blocks_for(tokens) - static_cast<int64_t>(prefix.size()) + revived <= num_free();
}

void BlockManager::take_prefix(BlockTable& table, std::span<const BlockId> prefix) {
  if (!table.blocks.empty()) throw UsageError("BlockManager::take_prefix: the table already has blocks");
  for (const BlockId b : prefix) {
    Block& block = blocks_.at(static_cast<size_t>(b));
    if (!block.cached) throw UsageError("BlockManager::take_prefix: block " + std::to_string(b) + " is not cached");
    if (block.refs++ == 0) free_.erase(block.free_at);
    table.blocks.push_back(b);
    table.last_hash = block.hash;
  }
  table.num_hashed = static_cast<int64_t>(prefix.size());
}

void BlockManager::cache_full_blocks(BlockTable& table, std::span<const int32_t> tokens, int64_t computed) {
  if (!prefix_caching_) return;
  const auto bs = static_cast<size_t>(block_size_);
  const auto full = static_cast<size_t>(std::min<int64_t>(computed, static_cast<int64_t>(tokens.size()))) / bs;
  for (auto i = static_cast<size_t>(table.num_hashed); i < full && i < table.blocks.size(); ++i) {
    const std::span<const int32_t> own = tokens.subspan(i * bs, bs);
    const uint64_t h = chain_hash(table.last_hash, own);
    Block& block = blocks_[static_cast<size_t>(table.blocks[i])];
    if (!cached_.contains(h) && !block.cached) {
      block.cached = true;
      block.hash = h;
      block.parent_hash = table.last_hash;
      block.tokens.assign(own.begin(), own.end());
      cached_.emplace(h, table.blocks[i]);
    }
    table.last_hash = h;
    table.num_hashed = static_cast<int64_t>(i) + 1;
  }
}

}  // namespace dsv4
