// Allocation of a sequence's per-layer caches, sized from the config and the capacity, and its
// block tables into the cache pool.
#include "model/cache.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace dsv4 {

namespace {

std::atomic<uint64_t> next_cache_id{1};

int64_t pages_for_entries(int64_t entries, int64_t page_rows) { return (entries + page_rows - 1) / page_rows; }

// The capacity, checked before anything is allocated for it.
int64_t checked_capacity(const ModelConfig& cfg, int64_t capacity) {
  if (capacity <= 0) throw UsageError("a sequence needs a positive capacity, got " + std::to_string(capacity));
  // Positions past max_position_embeddings are refused by the forward, so such a cache could
  // never be filled; refusing it here also keeps a typo from becoming a huge allocation.
  if (capacity > cfg.params().max_position_embeddings)
    throw UsageError("a sequence of " + std::to_string(capacity) + " tokens is longer than the model's " +
                     "max_position_embeddings (" + std::to_string(cfg.params().max_position_embeddings) + ")");
  return capacity;
}

// A pool holding one sequence's capacity in one page per ratio (checked before it is allocated).
std::shared_ptr<CachePool> own_pool(Ops& ops, const ModelConfig& cfg, int64_t capacity, DType dtype) {
  return std::make_shared<CachePool>(ops, cfg, dtype, CachePool::one_sequence(cfg, checked_capacity(cfg, capacity)));
}

}  // namespace

BlockTables::BlockTables(std::shared_ptr<CachePool> pool, int64_t capacity, PageNaming naming)
    : pool_(std::move(pool)), naming_(naming) {
  for (const auto& [m, p] : pool_->pages())
    tables_[m].assign(static_cast<size_t>(pages_for_entries(capacity / m, p.page_rows)), -1);
}

BlockTables::BlockTables(BlockTables&& other) noexcept
    : pool_(std::move(other.pool_)), naming_(other.naming_), tables_(std::move(other.tables_)) {
  other.tables_.clear();
}

BlockTables& BlockTables::operator=(BlockTables&& other) noexcept {
  if (this != &other) {
    give_back();
    pool_ = std::move(other.pool_);
    naming_ = other.naming_;
    tables_ = std::move(other.tables_);
    other.tables_.clear();
  }
  return *this;
}

BlockTables::~BlockTables() { give_back(); }

void BlockTables::give_back() {
  if (pool_ == nullptr || naming_ == PageNaming::kNamedByBlocks) return;
  for (const auto& [m, table] : tables_) {
    std::vector<int32_t> taken;
    std::copy_if(table.begin(), table.end(), std::back_inserter(taken), [](int32_t page) { return page >= 0; });
    pool_->give_back(m, taken);
  }
  tables_.clear();
}

void BlockTables::reserve(int64_t tokens) {
  for (auto& [m, table] : tables_) {
    const auto needed = static_cast<size_t>(pages_for_entries(tokens / m, pool_->pages(m).page_rows));
    if (needed > table.size())
      throw UsageError("block tables of " + std::to_string(table.size()) + " ratio-" + std::to_string(m) +
                       " pages cannot hold " + std::to_string(tokens) + " tokens");
    const auto first_missing = static_cast<size_t>(std::find(table.begin(), table.end(), -1) - table.begin());
    if (first_missing >= needed) continue;
    if (naming_ == PageNaming::kNamedByBlocks)
      throw UsageError(std::to_string(tokens) + " tokens need " + std::to_string(needed) + " ratio-" +
                       std::to_string(m) + " pages, but page " + std::to_string(first_missing) +
                       " of the sequence's block table is not named by a cache block yet");
    const std::vector<int32_t> pages = pool_->take(m, static_cast<int64_t>(needed - first_missing));
    std::copy(pages.begin(), pages.end(), table.begin() + static_cast<std::ptrdiff_t>(first_missing));
  }
}

void BlockTables::name_pages(std::span<const int32_t> blocks, int64_t block_size) {
  if (naming_ != PageNaming::kNamedByBlocks)
    throw UsageError("name_pages: this sequence takes its pages from the pool; it was not made to have them named");
  if (block_size <= 0) throw UsageError("name_pages: block_size = " + std::to_string(block_size) + " must be positive");
  for (auto& [m, table] : tables_) {
    const CachePool::Pages& p = pool_->pages(m);
    // The block holding the last token of page i's entries: page i itself (block_size / m entries
    // per page), or the block of entry i's last token (one entry per page).
    int64_t blocks_per_page = 0;
    if (p.page_rows * m == block_size)
      blocks_per_page = 1;
    else if (p.page_rows == 1 && m % block_size == 0)
      blocks_per_page = m / block_size;
    else
      throw UsageError("name_pages: ratio-" + std::to_string(m) + " pages of " + std::to_string(p.page_rows) +
                       " entries cannot be named by cache blocks of " + std::to_string(block_size) + " tokens");
    for (size_t i = 0; i < table.size(); ++i) {
      const auto block = static_cast<size_t>((static_cast<int64_t>(i) + 1) * blocks_per_page - 1);
      const int32_t page = block < blocks.size() ? blocks[block] : -1;
      if (page >= p.num_pages)
        throw UsageError("name_pages: block " + std::to_string(page) + " is beyond the pool's " +
                         std::to_string(p.num_pages) + " ratio-" + std::to_string(m) + " pages");
      table[i] = page;
    }
  }
}

SequenceCache::SequenceCache(Ops& ops, const ModelConfig& cfg, std::shared_ptr<CachePool> pool, int64_t capacity,
                             PageNaming naming, std::shared_ptr<StateSlots> slots)
    : capacity_(checked_capacity(cfg, capacity)), id_(next_cache_id++) {
  if (pool == nullptr) throw UsageError("a sequence needs a cache pool");
  const int64_t layers = cfg.num_layers() + cfg.num_mtp_layers();
  if (pool->num_layers() != layers)
    throw UsageError("the cache pool was made for " + std::to_string(pool->num_layers()) + " layers, the model has " +
                     std::to_string(layers));
  if (slots == nullptr) slots = std::make_shared<StateSlots>(ops, cfg, pool->dtype(), 1);
  if (slots->num_layers() != layers || slots->dtype() != pool->dtype())
    throw UsageError("the state slots were made for " + std::to_string(slots->num_layers()) + " layers of " +
                     std::string(dtype_name(slots->dtype())) + " windows; the cache pool holds " +
                     std::to_string(layers) + " layers of " + std::string(dtype_name(pool->dtype())));
  slot_ = StateSlot(std::move(slots));
  layers_ = slot_.slots().layers(slot_.index());
  blocks_ = BlockTables(std::move(pool), capacity, naming);
  main_layers_ = cfg.num_layers();
}

void SequenceCache::move_state(Ops& ops, StateSlot slot) {
  if (slot.slots().id() != slot_.slots().id())
    throw UsageError("move_state: slot " + std::to_string(slot.index()) + " is not one of the sequence's state slots");
  std::vector<LayerCache> to = slot.slots().layers(slot.index());
  for (size_t l = 0; l < to.size(); ++l) {
    const auto src = state_tensors(layers_[l]), dst = state_tensors(to[l]);
    for (size_t i = 0; i < src.size(); ++i)
      if (!src[i]->empty()) ops.copy({src[i]->view(), dst[i]->view()});
  }
  layers_ = std::move(to);
  slot_ = std::move(slot);
}

SequenceCache::SequenceCache(Ops& ops, const ModelConfig& cfg, int64_t capacity, DType dtype)
    : SequenceCache(ops, cfg, own_pool(ops, cfg, capacity, dtype), capacity) {}

// snapshot_state's tensors: every main layer's window, the ratio-4 layers' compressors.
int64_t SequenceCache::snapshot_bytes(const ModelConfig& cfg, DType dtype) {
  int64_t bytes = 0;
  for (int64_t l = 0; l < cfg.num_layers(); ++l) bytes += StateSlots::layer_bytes(cfg, l, dtype, cfg.compress_ratio(l) == 4);
  return bytes;
}

void SequenceCache::resume_on_prefix(int64_t resume, int64_t reused) {
  const std::string what = "resume at " + std::to_string(resume) + " on a prefix of " + std::to_string(reused) + " tokens";
  if (length_ != 0 || mtp_length_ != 0) throw UsageError(what + ": the cache already holds tokens");
  if (blocks_.naming() != PageNaming::kNamedByBlocks)
    throw UsageError(what + ": the cache's pages are not named by cache blocks, so it shares none");
  if (resume < 0 || resume > reused || reused > capacity_)
    throw UsageError(what + ": need 0 <= resume <= prefix <= capacity (" + std::to_string(capacity_) + ")");
  for (const auto& [m, pages] : pool().pages())
    if (reused % m != 0)
      throw UsageError(what + ": the prefix must be a multiple of the compression ratio " + std::to_string(m));
  length_ = resume;
  reused_ = reused;
}

int64_t StateSnapshot::bytes() const {
  int64_t total = 0;
  for (const DeviceTensor& t : tensors) total += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  return total;
}

// The state a snapshot holds, in its order: per main layer the window, then for ratio-4 layers
// the compressor's kv and score, then the index compressor's (CSA layers).
std::vector<const DeviceTensor*> SequenceCache::snapshot_state() const {
  std::vector<const DeviceTensor*> state;
  for (int64_t l = 0; l < main_layers_; ++l) {
    const LayerCache& layer = this->layer(l);
    state.push_back(&layer.window);
    if (layer.ratio != 4) continue;
    for (const CompressorState* s : {&layer.compressor, &layer.index_compressor}) {
      state.push_back(&s->kv);
      state.push_back(&s->score);
    }
  }
  return state;
}

StateSnapshot SequenceCache::snapshot(Ops& ops) const {
  for (const auto& [m, pages] : pool().pages())
    if (length_ % m != 0)
      throw UsageError("a state snapshot at " + std::to_string(length_) +
                       " tokens: not a multiple of the compression ratio " + std::to_string(m));
  StateSnapshot s;
  s.position = length_;
  for (const DeviceTensor* t : snapshot_state()) {
    DeviceTensor copy = ops.alloc_output(t->dtype(), t->shape());
    ops.copy({t->view(), copy.view()});
    s.tensors.push_back(std::move(copy));
  }
  return s;
}

void SequenceCache::resume_on_snapshot(Ops& ops, const StateSnapshot& s) {
  const std::vector<const DeviceTensor*> state = snapshot_state();
  if (state.size() != s.tensors.size())
    throw UsageError("a state snapshot of " + std::to_string(s.tensors.size()) + " tensors for a cache of " +
                     std::to_string(state.size()));
  for (size_t i = 0; i < state.size(); ++i)
    if (state[i]->shape() != s.tensors[i].shape() || state[i]->dtype() != s.tensors[i].dtype())
      throw UsageError("a state snapshot's tensor " + std::to_string(i) + " does not match the cache's");
  resume_on_prefix(s.position, s.position);
  for (size_t i = 0; i < state.size(); ++i) ops.copy({s.tensors[i].view(), state[i]->view()});
}

int64_t prefix_recompute_tokens(const ModelConfig& cfg) {
  const int64_t reach = cfg.params().sliding_window - 1;  // the window rows before a position
  int64_t tokens = 0;
  for (int64_t l = 0; l < cfg.num_layers(); ++l) {
    const int64_t m = cfg.compress_ratio(l);
    const int64_t compressor_rows = m > 0 ? StateSlots::compressor_ring_shape(m, 1)[0] : 0;  // the state rings' rows
    tokens = std::max(tokens, l * reach + std::max(reach, compressor_rows));
  }
  return tokens;
}

}  // namespace dsv4
