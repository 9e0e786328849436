// BlockManager: a free list and reference counts over block ids.
#include "scheduler/block_manager.h"

#include <string>

#include "core/error.h"

namespace dsv4 {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size) : block_size_(block_size) {
  if (num_blocks <= 0 || block_size <= 0)
    throw UsageError("BlockManager: " + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                     " tokens: both must be positive");
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<BlockId>(b));  // block 0 first
}

bool BlockManager::can_grow(const BlockTable& table, int64_t tokens) const {
  return blocks_for(tokens) - static_cast<int64_t>(table.blocks.size()) <= num_free();
}

void BlockManager::grow(BlockTable& table, int64_t tokens) {
  if (!can_grow(table, tokens))
    throw UsageError("BlockManager::grow: " + std::to_string(tokens) + " tokens need " +
                     std::to_string(blocks_for(tokens)) + " blocks, the table has " +
                     std::to_string(table.blocks.size()) + " and " + std::to_string(num_free()) + " are free");
  while (static_cast<int64_t>(table.blocks.size()) < blocks_for(tokens)) {
    const BlockId b = free_.back();
    free_.pop_back();
    ref_counts_[static_cast<size_t>(b)] = 1;
    table.blocks.push_back(b);
  }
}

BlockTable BlockManager::share(const BlockTable& table) {
  for (BlockId b : table.blocks) ++ref_counts_.at(static_cast<size_t>(b));
  return table;
}

void BlockManager::release(BlockTable& table) {
  for (BlockId b : table.blocks) {
    int32_t& count = ref_counts_.at(static_cast<size_t>(b));
    if (count <= 0) throw UsageError("BlockManager::release: block " + std::to_string(b) + " is not in use");
    if (--count == 0) free_.push_back(b);
  }
  table.blocks.clear();
}

}  // namespace dsv4
