// CachePool: the per-layer page pools, their geometry per compression ratio and the free lists.
#include "model/cache_pool.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/packed_entries.h"

namespace dsv4 {

namespace {

std::atomic<uint64_t> next_pool_id{1};

std::set<int64_t> compression_ratios(const ModelConfig& cfg) {
  std::set<int64_t> ratios;
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l)
    if (cfg.compress_ratio(l) > 0) ratios.insert(cfg.compress_ratio(l));
  return ratios;
}

}  // namespace

CachePool::CachePool(Ops& ops, const ModelConfig& cfg, DType dtype, const PagesByRatio& pages)
    : id_(next_pool_id++), dtype_(dtype), pages_(pages) {
  check_cache_dtype(ops, cfg, dtype);
  for (const int64_t m : compression_ratios(cfg))
    if (!pages_.contains(m)) throw UsageError("the cache pool has no pages for compression ratio " + std::to_string(m));
  for (const auto& [m, p] : pages_) {
    const std::string which = "the cache pool's ratio-" + std::to_string(m) + " pages";
    if (p.page_rows <= 0 || p.num_pages < 0)
      throw UsageError(which + ": " + std::to_string(p.num_pages) + " pages of " + std::to_string(p.page_rows) +
                       " rows (need rows > 0, pages >= 0)");
    if (p.num_pages > std::numeric_limits<int32_t>::max())
      throw UsageError(which + ": " + std::to_string(p.num_pages) + " pages do not fit i32 page ids");
    std::vector<int32_t>& free = free_[m];
    for (int64_t i = p.num_pages - 1; i >= 0; --i) free.push_back(static_cast<int32_t>(i));
  }
  const ModelParams& mp = cfg.params();
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l) {
    LayerPools pools;
    const int64_t m = cfg.compress_ratio(l);
    if (m > 0) {
      pools.ratio = m;
      const Pages& p = pages_.at(m);
      const DType stored = cache_storage_dtype(dtype);
      pools.compressed = ops.alloc(stored, {p.num_pages, p.page_rows, cache_stored_width(dtype, mp.head_dim)});
      if (cfg.layer_kind(l) == LayerKind::kCsa)
        pools.index_keys = ops.alloc(stored, {p.num_pages, p.page_rows, cache_stored_width(dtype, mp.index_head_dim)});
    }
    layers_.push_back(std::move(pools));
  }
}

CachePool::PagesByRatio CachePool::pages_for(const ModelConfig& cfg, int64_t sequences, int64_t capacity,
                                             int64_t page_rows) {
  if (sequences < 0 || capacity < 0 || page_rows <= 0)
    throw UsageError("cache pages for " + std::to_string(sequences) + " sequences of " + std::to_string(capacity) +
                     " tokens in pages of " + std::to_string(page_rows) + " rows: need positive rows");
  PagesByRatio pages;
  for (const int64_t m : compression_ratios(cfg))
    pages[m] = {page_rows, sequences * ((capacity / m + page_rows - 1) / page_rows)};
  return pages;
}

CachePool::PagesByRatio CachePool::per_block(const ModelConfig& cfg, int64_t num_blocks, int64_t block_size) {
  PagesByRatio pages;
  for (const int64_t m : compression_ratios(cfg)) {
    if (block_size % m != 0 && m % block_size != 0)
      throw UsageError("pages named by cache blocks need block_size (" + std::to_string(block_size) +
                       ") to divide or be a multiple of every compression ratio, and " + std::to_string(m) +
                       " is neither");
    pages[m] = {std::max<int64_t>(1, block_size / m), num_blocks};
  }
  return pages;
}

int64_t CachePool::block_bytes(const ModelConfig& cfg, DType dtype, int64_t block_size) {
  const PagesByRatio pages = per_block(cfg, 1, block_size);
  const ModelParams& p = cfg.params();
  int64_t bytes = 0;
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l) {
    const int64_t m = cfg.compress_ratio(l);
    if (m <= 0) continue;
    int64_t width = cache_stored_width(dtype, p.head_dim);
    if (cfg.layer_kind(l) == LayerKind::kCsa) width += cache_stored_width(dtype, p.index_head_dim);
    bytes += pages.at(m).page_rows * width * static_cast<int64_t>(dtype_size(cache_storage_dtype(dtype)));
  }
  return bytes;
}

CachePool::PagesByRatio CachePool::one_sequence(const ModelConfig& cfg, int64_t capacity) {
  PagesByRatio pages;
  for (const int64_t m : compression_ratios(cfg))
    pages[m] = {std::max<int64_t>(1, capacity / m), capacity / m > 0 ? 1 : 0};
  return pages;
}

const CachePool::Pages& CachePool::pages(int64_t ratio) const {
  const auto it = pages_.find(ratio);
  if (it == pages_.end())
    throw UsageError("the cache pool has no pages for compression ratio " + std::to_string(ratio));
  return it->second;
}

int64_t CachePool::free_pages(int64_t ratio) const {
  pages(ratio);
  const std::lock_guard lock(mutex_);
  return static_cast<int64_t>(free_.at(ratio).size());
}

std::vector<int32_t> CachePool::take(int64_t ratio, int64_t n) {
  const Pages& p = pages(ratio);
  const std::lock_guard lock(mutex_);
  std::vector<int32_t>& free = free_.at(ratio);
  if (n > static_cast<int64_t>(free.size()))
    throw UsageError("the cache pool is out of ratio-" + std::to_string(ratio) + " pages: " + std::to_string(n) +
                     " needed, " + std::to_string(free.size()) + " of " + std::to_string(p.num_pages) + " pages of " +
                     std::to_string(p.page_rows) + " rows free");
  std::vector<int32_t> taken(free.end() - n, free.end());
  std::reverse(taken.begin(), taken.end());
  free.resize(free.size() - static_cast<size_t>(n));
  return taken;
}

void CachePool::give_back(int64_t ratio, std::span<const int32_t> pages) {
  const Pages& p = this->pages(ratio);
  for (const int32_t page : pages)
    if (page < 0 || page >= p.num_pages)
      throw UsageError("page " + std::to_string(page) + " given back to the cache pool's " +
                       std::to_string(p.num_pages) + " ratio-" + std::to_string(ratio) + " pages");
  const std::lock_guard lock(mutex_);
  std::vector<int32_t>& free = free_.at(ratio);
  free.insert(free.end(), pages.rbegin(), pages.rend());
}

std::string cache_dtype_refusal(const Ops& ops, const ModelConfig& cfg, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF32 && dtype != DType::kF8E4M3)
    return "caches hold bf16 or f32 rows or fp8 entries, not " + std::string(dtype_name(dtype));
  if (dtype != DType::kF8E4M3) return "";
  if (!ops.reads_packed_caches())
    return "fp8 caches: the " + std::string(ops.name()) +
           " backend does not read packed cache entries as it is set up (the cpu backend does, and cuda with its "
           "default tensor-core attention); use bf16 caches";
  const ModelParams& p = cfg.params();
  if (p.head_dim != Fp8CacheLayout::kHeadDim || p.qk_rope_head_dim != Fp8CacheLayout::kRopeDim ||
      p.index_head_dim != Mxfp4KeyLayout::kDim)
    return "fp8 caches pack DeepSeek-V4's entries (head_dim " + std::to_string(Fp8CacheLayout::kHeadDim) +
           ", qk_rope_head_dim " + std::to_string(Fp8CacheLayout::kRopeDim) + ", index_head_dim " +
           std::to_string(Mxfp4KeyLayout::kDim) + "); this model has head_dim " + std::to_string(p.head_dim) +
           ", qk_rope_head_dim " + std::to_string(p.qk_rope_head_dim) + ", index_head_dim " +
           std::to_string(p.index_head_dim);
  return "";
}

void check_cache_dtype(const Ops& ops, const ModelConfig& cfg, DType dtype) {
  if (const std::string why = cache_dtype_refusal(ops, cfg, dtype); !why.empty()) throw UsageError(why);
}

DType auto_cache_dtype(const Ops& ops, const ModelConfig& cfg) {
  return cache_dtype_refusal(ops, cfg, DType::kF8E4M3).empty() ? DType::kF8E4M3 : DType::kBF16;
}

void fill_nan(Ops& ops, TensorView t) {
  const auto n = static_cast<size_t>(t.numel());
  if (t.dtype() == DType::kU8) {  // packed entries: 0xFF is NaN as e4m3, e8m0 and a bf16 pair
    const std::vector<uint8_t> nan(n, 0xFF);
    ops.upload(host_view(nan.data(), t.dtype(), t.shape()), t);
  } else if (t.dtype() == DType::kBF16) {
    const std::vector<uint16_t> nan(n, 0x7FC0);
    ops.upload(host_view(nan.data(), t.dtype(), t.shape()), t);
  } else if (t.dtype() == DType::kF32) {
    const std::vector<uint32_t> nan(n, 0x7FC00000u);
    ops.upload(host_view(nan.data(), t.dtype(), t.shape()), t);
  } else {
    throw UsageError("fill_nan: " + std::string(dtype_name(t.dtype())) + " has no NaN to fill (bf16, f32 or packed u8)");
  }
}

void CachePool::poison(Ops& ops, int64_t ratio, std::span<const int32_t> pages) const {
  const Pages& p = this->pages(ratio);
  for (const int32_t page : pages)
    if (page < 0 || page >= p.num_pages)
      throw UsageError("page " + std::to_string(page) + " to poison in the cache pool's " +
                       std::to_string(p.num_pages) + " ratio-" + std::to_string(ratio) + " pages");
  // One page of NaN in the pool's dtype per page size (entries and keys differ in width), made
  // once for all the layers.
  std::map<int64_t, DeviceTensor> nan_pages;
  const auto nan_page = [&](int64_t elems) -> const DeviceTensor& {
    DeviceTensor& nan = nan_pages[elems];
    if (!nan.empty()) return nan;
    nan = ops.alloc(cache_storage_dtype(dtype_), {1, elems});
    fill_nan(ops, nan.view());
    return nan;
  };
  for (const LayerPools& layer : layers_)
    for (const DeviceTensor* pool : {&layer.compressed, &layer.index_keys}) {
      if (layer.ratio != ratio || pool->empty()) continue;
      const int64_t page_elems = p.page_rows * pool->dim(2);
      const DeviceTensor& nan = nan_page(page_elems);
      const TensorView rows = pool->reshaped({p.num_pages, page_elems}).view();
      for (const int32_t page : pages) ops.copy({nan.view(), slice_rows(rows, page, page + 1)});
    }
}

}  // namespace dsv4
