// CudaOps attention family: the compressor's gated pooling with its per-sequence state rings
// (MODEL.md §4), the lightning indexer's scores and top-k (§5), and sparse attention with the
// per-head sink over the window and the compressed entries (§3.5-3.6). Arguments are checked as
// CpuOps checks them; sparse attention and the indexer run the whole batch in one launch per
// kernel (on bf16 tensor cores in the default numerics, in the CPU's operation order for f32),
// the compressor two launches for the batch, on the op's stream. The compressed entries and
// indexer keys are read through the sequences' block tables, plan data already in device memory
// that the kernels read there, so a graph replays with the next step's pages.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/attention/sparse_attn_mma.h"
#include "kernels/attention/sparse_attn_rows.h"
#include "kernels/compressor/compressor_pool.h"
#include "kernels/indexer/indexer_topk.h"
#include "kv/packed_entries.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

// A [capacity, width] cache (float rows or packed entries) that must hold `rows` entries.
void check_cache(const char* op, ConstTensorView cache, int64_t rows, int64_t width) {
  expect_rank(op, "cache", cache, 2);
  if (!cache_rows_hold(cache.dtype(), cache.dim(1), width) || cache.dim(0) < rows)
    throw UsageError(std::string(op) + ": a cache of " + std::string(dtype_name(cache.dtype())) +
                     shape_str(cache.shape()) + " cannot hold " + std::to_string(rows) + " entries of width " +
                     std::to_string(width));
}

// Whether a cache tensor holds packed entries; `packed` is what the batch's caches before it held
// (nullopt for the first), and a batch mixing packed entries with rows is refused by name.
bool packed_cache(const char* op, const std::string& what, ConstTensorView cache, std::optional<bool>& packed) {
  const bool is_packed = packed_entry(cache.dtype(), cache.dim(cache.rank() - 1)) != PackedEntry::kNone;
  if (packed.has_value() && *packed != is_packed)
    throw UsageError(std::string(op) + ": " + what + " holds " + (is_packed ? "packed entries" : "rows") +
                     " where the batch's other caches hold " + (is_packed ? "rows" : "packed entries"));
  packed = is_packed;
  return is_packed;
}

// A cache tensor as the kernels take it: packed entries as their bytes, rows as floats.
kernels::FloatPtr cache_ptr(ConstTensorView cache, bool is_packed) {
  return is_packed ? kernels::FloatPtr{cache.bytes()} : float_ptr(cache);
}

// For each of a batch's T tokens, the index of its sequence among those with tokens (the order in
// which a kernel's sequence table lists them). The slices were checked to cover each token once.
template <typename Seq>
std::vector<int32_t> sequence_of_each_token(std::span<const Seq> seqs, int64_t T) {
  std::vector<int32_t> out(static_cast<size_t>(T));
  int32_t index = 0;
  for (const Seq& s : seqs) {
    if (s.slice.num_tokens == 0) continue;
    std::fill_n(out.begin() + s.slice.token_begin, s.slice.num_tokens, index++);
  }
  return out;
}

// The most entries a batch's paged caches can address (table pages x page rows): while a graph
// is captured, the bound of a launch shape that must hold at every later decode step.
template <typename Seq, typename Cache>
int64_t max_capacity(std::span<const Seq> seqs, Cache cache_of) {
  int64_t rows = 0;
  for (const Seq& s : seqs) {
    const PageTable table = page_table(cache_of(s));
    rows = std::max(rows, table.size * table.page_rows);
  }
  return rows;
}

// Packed cache pages as bf16 rows for one launch (kernels::unpack_cache_pages). A prefill's
// tokens read their sequences' entries over and over, so unpacking the pages they can reach once
// costs less than unpacking entries in every tile that reads them (docs/PERF.md session 39); a
// decode token reads a few hundred of its sequence's thousands of entries once, and unpacks them
// in its tiles. The values are the same either way, so the bits are. Used in two rounds: count
// every source (pools' first pages, window rings), then, if unpack_pays, place them in the same
// order, which rewrites each sequence's pointers into the scratch and lists the unpack jobs.
class UnpackedPages {
 public:
  explicit UnpackedPages(PackedEntry kind)
      : kind_(kind), width_(kind == PackedEntry::kFp8Attention ? Fp8CacheLayout::kHeadDim : Mxfp4KeyLayout::kDim) {}

  void count_pages(int64_t pages, int64_t page_rows) {
    if (pages == 0) return;
    pool_rows_ = (pool_rows_ + page_rows - 1) / page_rows * page_rows + pages * page_rows;
    slots_ += pages;
    max_page_rows_ = std::max(max_page_rows_, page_rows);
  }
  void count_ring(int64_t rows) {
    ring_rows_ += rows;
    max_page_rows_ = std::max(max_page_rows_, rows);
  }

  // Whether tokens that read `reads` entries in all should read the counted pages unpacked: each
  // counted row read at least kMinReuse times on average (an 8k prefill reads its rows hundreds of
  // times, a decode batch a fraction of once), and the scratch within kMaxBytes.
  bool unpack_pays(int64_t reads) const {
    const int64_t rows = pool_rows_ + ring_rows_;
    return rows > 0 && rows * kMinReuse <= reads && bytes() <= kMaxBytes;
  }

  void allocate(cudaStream_t stream, CaptureArena* arena) { scratch_.emplace(bytes(), stream, arena); }

  // The pages [0, pages) of `table` (a pool of packed entries at `pool`) as bf16 rows: where they
  // are and the table that finds them (a page the source lacks is -1 there too).
  std::pair<kernels::FloatPtr, PageTable> place_pages(const void* pool, const PageTable& table, int64_t pages) {
    const int64_t page_rows = table.page_rows;
    pool_at_ = (pool_at_ + page_rows - 1) / page_rows * page_rows;
    int32_t* slots = slots_at() + slot_at_;
    for (int64_t i = 0; i < pages; ++i) {
      jobs_.push_back({static_cast<const uint8_t*>(pool), table.pages + i, table.num_pages, pool_at_, slots + i,
                       static_cast<int32_t>(page_rows)});
      pool_at_ += page_rows;
    }
    slot_at_ += pages;
    return {rows_at(0), PageTable{slots, pages, page_rows, pool_rows_ / page_rows}};
  }
  // A window ring of `rows` packed entries (one page) as bf16 rows.
  kernels::FloatPtr place_ring(const void* ring, int64_t rows) {
    const int64_t at = pool_rows_ + ring_at_;
    jobs_.push_back({static_cast<const uint8_t*>(ring), nullptr, 1, at, nullptr, static_cast<int32_t>(rows)});
    ring_at_ += rows;
    return rows_at(at);
  }

  const std::vector<kernels::UnpackPageJob>& jobs() const { return jobs_; }

  // Unpacks the placed pages; `jobs` is jobs() in device memory.
  void run(const kernels::UnpackPageJob* jobs, cudaStream_t stream) const {
    kernels::unpack_cache_pages({jobs, static_cast<int64_t>(jobs_.size()), max_page_rows_, kind_,
                                 scratch_->get<uint16_t>()},
                                stream);
  }

 private:
  static constexpr int64_t kMinReuse = 4;
  static constexpr int64_t kMaxBytes = int64_t{256} << 20;

  int64_t row_bytes() const { return (pool_rows_ + ring_rows_) * width_ * 2; }
  int64_t bytes() const { return row_bytes() + slots_ * static_cast<int64_t>(sizeof(int32_t)); }
  kernels::FloatPtr rows_at(int64_t row) const { return {scratch_->get<uint16_t>() + row * width_, true}; }
  int32_t* slots_at() const { return reinterpret_cast<int32_t*>(scratch_->get<std::byte>() + row_bytes()); }

  PackedEntry kind_;
  int64_t width_;
  int64_t pool_rows_ = 0, ring_rows_ = 0, slots_ = 0, max_page_rows_ = 0;  // counted
  int64_t pool_at_ = 0, ring_at_ = 0, slot_at_ = 0;                        // placed
  std::optional<StreamBuffer> scratch_;
  std::vector<kernels::UnpackPageJob> jobs_;
};

// The pages of `table` that hold entries [0, entries) (none for a table without rows).
int64_t pages_holding(const PageTable& table, int64_t entries) {
  if (table.page_rows <= 0) return 0;
  return std::min(table.size, (entries + table.page_rows - 1) / table.page_rows);
}

}  // namespace

void CudaOps::compressor_pool(const CompressorPoolParams& p) {
  check_params(p);
  const int64_t T = p.kv.dim(0), width = p.kv.dim(1), m = p.ratio;
  const int64_t coff = m == 4 ? 2 : 1, dc = width / coff, ring = coff * m;
  if (width % coff != 0)
    throw UsageError("compressor_pool: kv width " + std::to_string(width) + " must split into " + std::to_string(coff) +
                     " halves");
  expect_shape("compressor_pool", "score", p.score, {T, width});
  expect_dtype("compressor_pool", "score", p.score, DType::kF32);
  const kernels::FloatPtr ape = weight_floats("compressor_pool", p.ape, {m, width});
  expect_rank("compressor_pool", "out", p.out, 2);
  expect_dtype("compressor_pool", "out", p.out, DType::kF32);
  if (p.out.dim(1) != dc) throw UsageError("compressor_pool: out must have " + std::to_string(dc) + " columns");

  kernels::CompressorPoolPlan plan;
  for (const CompressorSeq& s : p.seqs) {
    expect_shape("compressor_pool", "state_kv", s.state_kv, {ring, width});
    expect_shape("compressor_pool", "state_score", s.state_score, {ring, width});
    expect_dtype("compressor_pool", "state_kv", s.state_kv, DType::kF32);
    expect_dtype("compressor_pool", "state_score", s.state_score, DType::kF32);
    const SeqSlice& sl = s.slice;
    if (sl.num_tokens <= 0) continue;
    if (sl.token_begin < 0 || sl.token_begin + sl.num_tokens > T || sl.start_pos < 0)
      throw UsageError("compressor_pool: tokens [" + std::to_string(sl.token_begin) + ", " +
                       std::to_string(sl.token_begin + sl.num_tokens) + ") at position " + std::to_string(sl.start_pos) +
                       " are outside the batch of " + std::to_string(T));
    kernels::CompressorPoolParams k;
    k.kv = p.kv.data<float>() + sl.token_begin * width;
    k.score = p.score.data<float>() + sl.token_begin * width;
    k.ape = ape;
    k.state_kv = s.state_kv.data<float>();
    k.state_score = s.state_score.data<float>();
    k.out = p.out.data<float>() + s.out_begin * dc;
    k.width = width;
    k.ratio = m;
    k.start_pos = p.positions.data<int32_t>() + sl.token_begin;
    k.num_tokens = sl.num_tokens;
    kernels::add_compressor_slice(plan, k);
  }
  if (plan.seqs.empty()) return;
  TableBytes bytes;
  const size_t seqs_at = bytes.add(plan.seqs), pool_at = bytes.add(plan.pool_items), ring_at = bytes.add(plan.ring_items);
  const DeviceTables table = upload_tables(bytes);
  kernels::CompressorPoolBatch b;
  b.seqs = table.at<kernels::CompressorPoolParams>(seqs_at);
  b.pool_items = table.at<kernels::CompressorPoolItem>(pool_at);
  b.ring_items = table.at<kernels::CompressorPoolItem>(ring_at);
  b.pool_count = static_cast<int64_t>(plan.pool_items.size());
  b.ring_count = static_cast<int64_t>(plan.ring_items.size());
  b.width = width;
  b.ratio = m;
  kernels::compressor_pool(b, stream_);
}

void CudaOps::indexer_topk(const IndexerTopkParams& p) {
  check_params(p);
  const int64_t T = p.q.dim(0), heads = p.q.dim(1), dh = p.q.dim(2);
  const int64_t k = p.topk.dim(1);

  if (T == 0) return;
  std::vector<kernels::IndexerSeqDesc> seqs;
  int64_t score_stride = 0;
  bool keys_bf16 = true;
  std::optional<bool> packed;
  std::vector<int64_t> visible_keys;  // each sequence's at its last token
  int64_t reads = 0;                  // keys the batch's tokens score (at most)
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const IndexerSeq& s = p.seqs[i];
    const SeqSlice& sl = s.slice;
    if (sl.num_tokens == 0) continue;
    const int64_t visible = (sl.start_pos + sl.num_tokens) / p.ratio;
    visible_keys.push_back(visible);
    reads += sl.num_tokens * visible;
    score_stride = std::max(score_stride, visible);
    const bool is_packed =
        packed_cache("indexer_topk", "sequence " + std::to_string(i) + "'s keys", s.keys.pool, packed);
    seqs.push_back({sl.token_begin, cache_ptr(ConstTensorView(s.keys.pool), is_packed), page_table(s.keys)});
    keys_bf16 = keys_bf16 && s.keys.pool.dtype() == DType::kBF16;
  }
  // A prefill's tokens score the packed keys they can reach unpacked into bf16 rows.
  UnpackedPages unpacked(PackedEntry::kMxfp4Key);
  bool unpack = false;
  if (packed.value_or(false) && !capturing()) {
    for (size_t i = 0; i < seqs.size(); ++i)
      unpacked.count_pages(pages_holding(seqs[i].key_pages, visible_keys[i]), seqs[i].key_pages.page_rows);
    unpack = unpacked.unpack_pays(reads);
  }
  if (unpack) {
    unpacked.allocate(stream_, arena());
    for (size_t i = 0; i < seqs.size(); ++i)
      std::tie(seqs[i].keys, seqs[i].key_pages) =
          unpacked.place_pages(seqs[i].keys.data, seqs[i].key_pages, pages_holding(seqs[i].key_pages, visible_keys[i]));
    keys_bf16 = true;
  }
  const bool packed_keys = packed.value_or(false) && !unpack;
  // The one choice of score kernel: tensor cores for bf16 q and bf16 or packed keys (the default
  // numerics, where they equal the CPU's scores: kernels/indexer/indexer_mma_scores.cu), the exact
  // kernel for fp32 (exact math) and shapes the tensor-core kernel does not take.
  const kernels::IndexerScoreKernel score_kernel =
      kernels::indexer_score_kernel_for(p.q.dtype() == DType::kBF16, keys_bf16 || packed_keys, heads, dh);
  if (packed_keys && score_kernel != kernels::IndexerScoreKernel::kTensorCoreBf16)
    throw UsageError("indexer_topk: packed keys are read by the tensor-core score kernel, which takes bf16 q of " +
                     std::to_string(kernels::kIndexerMmaHeadDim) + " dims and up to " +
                     std::to_string(kernels::kIndexerMmaMaxHeads) + " heads; q is " +
                     std::string(dtype_name(p.q.dtype())) + " " + shape_str(p.q.shape()));
  if (score_kernel == kernels::IndexerScoreKernel::kTensorCoreBf16) {
    const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
    bool any_misaligned = misaligned(p.q.bytes());
    for (const kernels::IndexerSeqDesc& s : seqs) any_misaligned = any_misaligned || misaligned(s.keys.data);
    if (any_misaligned)
      throw UsageError("indexer_topk: the tensor-core score kernel reads q and the keys in 16-byte pieces; a view "
                       "starts at an address that is not a multiple of 16");
  }
  // A graph's scores must have room for the keys of any later step: all its tables address (a
  // recorded step's plan sizes them by its positions bound, ForwardBatch::table_positions).
  if (capturing()) score_stride = max_capacity(p.seqs, [](const IndexerSeq& s) { return s.keys; });
  TableBytes bytes;
  const size_t seqs_at = bytes.add(seqs), tokens_at = bytes.add(sequence_of_each_token(p.seqs, T));
  const size_t jobs_at = bytes.add(unpacked.jobs());
  const DeviceTables table = upload_tables(bytes);
  if (unpack) unpacked.run(table.at<kernels::UnpackPageJob>(jobs_at), stream_);
  const StreamBuffer scores(static_cast<size_t>(T * score_stride) * sizeof(float), stream_, arena());

  kernels::IndexerTopkParams kp;
  kp.q = float_ptr(p.q);
  kp.weights = float_ptr(p.weights);
  kp.seqs = table.at<kernels::IndexerSeqDesc>(seqs_at);
  kp.seq_of_token = table.at<int32_t>(tokens_at);
  kp.positions = p.positions.data<int32_t>();
  kp.scores = scores.get<float>();
  kp.topk = p.topk.data<int32_t>();
  kp.weight_scale = p.weight_scale;
  kp.tokens = T;
  kp.heads = heads;
  kp.dh = dh;
  kp.ratio = p.ratio;
  kp.score_stride = score_stride;
  kp.k = k;
  kp.score_kernel = score_kernel;
  kp.packed_keys = packed_keys;
  kernels::indexer_topk(kp, stream_);
}

void CudaOps::sparse_attention(const SparseAttentionParams& p) {
  check_params(p);
  const int64_t T = p.q.dim(0), H = p.q.dim(1), d = p.q.dim(2), W = p.window;
  const kernels::FloatPtr sink = weight_floats("sparse_attention", p.sink, {H});
  const bool has_topk = !is_empty(p.topk);
  for (const AttentionSeq& s : p.seqs)
    if (s.slice.start_pos > 0) check_cache("sparse_attention", s.window, W, d);
  const int64_t k = has_topk ? p.topk.dim(1) : 0;
  if (T == 0) return;

  std::vector<kernels::SparseAttnSeq> seqs;
  int64_t max_entries = 0;
  // The tensor-core kernel takes bf16 rows of the head dim it is built for, 16-byte aligned, or
  // packed entries (the default numerics); exact-math (f32) forwards keep the CPU's operation order.
  const auto mma_ready = [](ConstTensorView v, DType also = DType::kBF16) {
    return (v.dtype() == DType::kBF16 || v.dtype() == also) && reinterpret_cast<uintptr_t>(v.bytes()) % 16 == 0;
  };
  bool use_mma = options_.sparse_attention == SparseAttention::kTensorCores && d == kernels::kSparseAttnMmaHeadDim &&
                 mma_ready(p.q) && mma_ready(p.kv) && mma_ready(p.out);
  std::optional<bool> packed;
  std::vector<int64_t> visible_compressed;  // each sequence's at its last token
  int64_t reads = 0;                        // entries the batch's tokens read (at most)
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const AttentionSeq& s = p.seqs[i];
    const SeqSlice& sl = s.slice;
    if (sl.num_tokens == 0) continue;
    kernels::SparseAttnSeq desc;
    desc.token_begin = sl.token_begin;
    if (!is_empty(s.window)) {  // kept even at position 0: a graph's later steps read it
      const bool is_packed = packed_cache("sparse_attention", "sequence " + std::to_string(i) + "'s window", s.window, packed);
      desc.window = cache_ptr(s.window, is_packed);
      desc.window_rows = s.window.dim(0);
      use_mma = use_mma && mma_ready(s.window, DType::kU8);
    }
    if (p.ratio > 0) {
      const bool is_packed = packed_cache("sparse_attention", "sequence " + std::to_string(i) + "'s compressed pool",
                                          s.compressed.pool, packed);
      desc.compressed = cache_ptr(ConstTensorView(s.compressed.pool), is_packed);
      desc.compressed_pages = page_table(s.compressed);
      use_mma = use_mma && mma_ready(s.compressed.pool, DType::kU8);
    }
    seqs.push_back(desc);
    const int64_t last = sl.start_pos + sl.num_tokens - 1;
    const int64_t visible = p.ratio > 0 ? (last + 1) / p.ratio : 0;
    const int64_t entries = std::min(W, last + 1) + (has_topk ? std::min(k, visible) : visible);
    visible_compressed.push_back(visible);
    reads += sl.num_tokens * entries;
    max_entries = std::max(max_entries, std::min(W, last + 1) + (has_topk ? k : visible));
  }
  // A graph's launch shape must fit any later step's entries: the window and all the tables
  // address (sized by the recorded step's positions bound).
  if (capturing())
    max_entries = W + (p.ratio == 0 ? 0
                       : has_topk   ? k
                                    : max_capacity(p.seqs, [](const AttentionSeq& s) { return s.compressed; }));
  // A prefill's tokens read the packed pages they can reach unpacked into bf16 rows.
  UnpackedPages unpacked(PackedEntry::kFp8Attention);
  bool unpack = false;
  if (packed.value_or(false) && !capturing()) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].window.data != nullptr) unpacked.count_ring(seqs[i].window_rows);
      if (p.ratio > 0)
        unpacked.count_pages(pages_holding(seqs[i].compressed_pages, visible_compressed[i]),
                             seqs[i].compressed_pages.page_rows);
    }
    unpack = unpacked.unpack_pays(reads);
  }
  if (unpack) {
    unpacked.allocate(stream_, arena());
    for (size_t i = 0; i < seqs.size(); ++i) {
      kernels::SparseAttnSeq& desc = seqs[i];
      if (desc.window.data != nullptr) desc.window = unpacked.place_ring(desc.window.data, desc.window_rows);
      if (p.ratio > 0)
        std::tie(desc.compressed, desc.compressed_pages) = unpacked.place_pages(
            desc.compressed.data, desc.compressed_pages, pages_holding(desc.compressed_pages, visible_compressed[i]));
    }
  }
  TableBytes bytes;
  const size_t seqs_at = bytes.add(seqs), tokens_at = bytes.add(sequence_of_each_token(p.seqs, T));
  const size_t jobs_at = bytes.add(unpacked.jobs());
  const DeviceTables table = upload_tables(bytes);
  if (unpack) unpacked.run(table.at<kernels::UnpackPageJob>(jobs_at), stream_);

  kernels::SparseAttnRowsParams kp;
  kp.q = float_ptr(p.q);
  kp.kv = float_ptr(p.kv);
  kp.seqs = table.at<kernels::SparseAttnSeq>(seqs_at);
  kp.seq_of_token = table.at<int32_t>(tokens_at);
  kp.positions = p.positions.data<int32_t>();
  kp.topk = has_topk ? p.topk.data<int32_t>() : nullptr;
  kp.sink = sink;
  kp.out = float_ptr(p.out);
  kp.tokens = T;
  kp.heads = H;
  kp.d = d;
  kp.window_size = W;
  kp.ratio = p.ratio;
  kp.k = k;
  kp.softmax_scale = p.softmax_scale;
  const auto run_mma = [&] {
    const kernels::SparseAttnMmaPlan plan = kernels::sparse_attn_mma_plan(T, H, max_entries, sm_count_);
    const StreamBuffer workspace(plan.workspace_bytes, stream_, arena());
    kernels::sparse_attn_mma(kp, plan, workspace.get<void>(), stream_);
  };
  if (packed.value_or(false) && !unpack) {
    if (!use_mma)
      throw UsageError("sparse_attention: packed cache entries are read by the tensor-core kernel only, which takes "
                       "bf16 q, kv and out of head dim " + std::to_string(kernels::kSparseAttnMmaHeadDim) +
                       ", 16-byte aligned (the cuda backend's sparse attention set to tensor cores)");
    // The batch's own window rows as packed entries too (one page of an even number of entries,
    // so every entry's data is 16-byte aligned), so the kernel reads a single form. The forward has
    // put them on the cache's grid: packing changes no value.
    const int64_t kv_page_rows = T + T % 2;
    const StreamBuffer kv_packed(static_cast<size_t>(Fp8CacheLayout{static_cast<int>(kv_page_rows)}.page_bytes()),
                                 stream_, arena());
    kernels::pack_cache_rows({float_ptr(p.kv), T, PackedEntry::kFp8Attention, kv_packed.get<uint8_t>(),
                              static_cast<int>(kv_page_rows)},
                             stream_);
    kp.kv = kernels::FloatPtr{kv_packed.get<uint8_t>()};
    kp.kv_page_rows = kv_page_rows;
    kp.packed = true;
    run_mma();
    return;
  }
  if (use_mma) run_mma();
  else kernels::sparse_attn_rows(kp, stream_);
}

}  // namespace dsv4::cuda
