// check_params for every op (see param_checks.h).
#include "ops/param_checks.h"

#include <cmath>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kv/packed_entries.h"
#include "ops/arg_checks.h"
#include "sampling/logit_edit.h"
#include "sampling/token_draw.h"

namespace dsv4 {

namespace {

// The sequences' slices lie inside the batch of T tokens and cover each token exactly once.
template <typename Seq>
void check_slices(const char* op, std::span<const Seq> seqs, int64_t T) {
  std::vector<char> covered(static_cast<size_t>(T), 0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqSlice& sl = seqs[s].slice;
    if (sl.token_begin < 0 || sl.num_tokens < 0 || sl.token_begin + sl.num_tokens > T || sl.start_pos < 0)
      throw UsageError(std::string(op) + ": sequence " + std::to_string(s) + " covers tokens [" +
                       std::to_string(sl.token_begin) + ", " + std::to_string(sl.token_begin + sl.num_tokens) +
                       ") of a batch of " + std::to_string(T));
    for (int64_t t = sl.token_begin; t < sl.token_begin + sl.num_tokens; ++t) {
      if (covered[static_cast<size_t>(t)])
        throw UsageError(std::string(op) + ": token " + std::to_string(t) + " belongs to two sequences");
      covered[static_cast<size_t>(t)] = 1;
    }
  }
  for (int64_t t = 0; t < T; ++t)
    if (!covered[static_cast<size_t>(t)])
      throw UsageError(std::string(op) + ": token " + std::to_string(t) + " belongs to no sequence");
}

// A row copy's source is [rows, width] (`op`: src must be ...).
void expect_row_source(const char* op, ConstTensorView src) {
  if (src.rank() != 2)
    throw UsageError(std::string(op) + ": src must be [rows, width], got " + shape_str(src.shape()));
}

// A row copy's destination takes the source's rows: [*, width] of its dtype. `what` names the
// destination in the message ("copy_rows: copy 0: dst").
void expect_rows_of(const std::string& what, ConstTensorView dst, ConstTensorView src) {
  if (dst.rank() != 2 || dst.dtype() != src.dtype() || dst.dim(1) != src.dim(1))
    throw UsageError(what + " " + std::string(dtype_name(dst.dtype())) + shape_str(dst.shape()) + " is not [*, " +
                     std::to_string(src.dim(1)) + "] " + std::string(dtype_name(src.dtype())));
}

// A paged cache's pool is [pages, page_rows, width] and its table [pages] i32 (`what` names the
// cache in the message, "sparse_attention: sequence 0's compressed").
void expect_paged_cache(const std::string& what, const PagedCache& c) {
  if (c.pool.rank() != 3)
    throw UsageError(what + " pool has shape " + shape_str(c.pool.shape()) + ", expected [pages, page_rows, width]");
  if (c.table.rank() != 1 || c.table.dtype() != DType::kI32)
    throw UsageError(what + " table is " + std::string(dtype_name(c.table.dtype())) + shape_str(c.table.shape()) +
                     ", expected i32[pages]");
}

// A reader's paged cache: float rows or packed entries of `width` values, its table reaching the
// entries the slice's last token sees.
void expect_readable_cache(const std::string& what, const PagedCache& c, int64_t width, int64_t entries) {
  expect_paged_cache(what, c);
  if (!cache_rows_hold(c.pool.dtype(), c.pool.dim(2), width))
    throw UsageError(what + " pool " + std::string(dtype_name(c.pool.dtype())) + shape_str(c.pool.shape()) +
                     " does not hold f32 or bf16 rows or packed entries of width " + std::to_string(width));
  if (c.table.numel() * c.pool.dim(1) < entries)
    throw UsageError(what + " table of " + std::to_string(c.table.numel()) + " pages of " +
                     std::to_string(c.pool.dim(1)) + " rows cannot hold the " + std::to_string(entries) +
                     " entries its tokens see");
}

}  // namespace

void check_params(const AddBroadcastParams& p) {
  expect_rank("add_broadcast", "a", p.a, 3);
  expect_float("add_broadcast", "a", p.a);
  expect_float("add_broadcast", "b", p.b);
  const int64_t T = p.a.dim(0), D = p.a.dim(2);
  expect_shape("add_broadcast", "b", p.b, {T, D});
  expect_shape("add_broadcast", "out", p.out, p.a.shape());
}

void check_params(const CompressorPoolParams& p) {
  expect_rank("compressor_pool", "kv", p.kv, 2);
  expect_dtype("compressor_pool", "kv", p.kv, DType::kF32);
  expect_shape("compressor_pool", "positions", p.positions, {p.kv.dim(0)});
  expect_dtype("compressor_pool", "positions", p.positions, DType::kI32);
  const int64_t m = p.ratio;
  if (m <= 0) throw UsageError("compressor_pool: ratio must be positive");
  expect_rank("compressor_pool", "out", p.out, 2);
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const CompressorSeq& seq = p.seqs[s];
    const int64_t rows = compressor_block_rows(seq.slice.num_tokens, m);
    if (rows > 0 && (seq.out_begin < 0 || seq.out_begin + rows > p.out.dim(0)))
      throw UsageError("compressor_pool: sequence " + std::to_string(s) + "'s " + std::to_string(rows) +
                       " block rows from row " + std::to_string(seq.out_begin) + " do not fit out " +
                       shape_str(p.out.shape()));
  }
}

void check_params(const CopyParams& p) {
  if (p.src.dtype() != p.dst.dtype()) {  // a conversion; equal dtypes copy bytes (packed caches too)
    expect_float("copy", "src", p.src);
    expect_float("copy", "dst", p.dst);
  }
  if (p.src.numel() != p.dst.numel())
    throw UsageError("copy: " + shape_str(p.src.shape()) + " and " + shape_str(p.dst.shape()) +
                     " differ in element count");
}

void check_params(const WriteCacheRowsParams& p) {
  expect_row_source("write_cache_rows", p.src);
  expect_shape("write_cache_rows", "dst_rows", p.dst_rows, {p.src.dim(0)});
  expect_dtype("write_cache_rows", "dst_rows", p.dst_rows, DType::kI32);
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const CacheRows& c = p.seqs[i];
    const std::string what = "write_cache_rows: sequence " + std::to_string(i) + ": ";
    expect_paged_cache(what + "cache", c.cache);
    const bool packs = packed_entry(c.cache.pool.dtype(), c.cache.pool.dim(2)) != PackedEntry::kNone;
    const bool holds = packs ? p.src.dtype() == DType::kBF16 && unpacked_width(DType::kU8, c.cache.pool.dim(2)) == p.src.dim(1)
                             : c.cache.pool.dtype() == p.src.dtype() && c.cache.pool.dim(2) == p.src.dim(1);
    if (!holds)
      throw UsageError(what + "cache pool " + std::string(dtype_name(c.cache.pool.dtype())) +
                       shape_str(c.cache.pool.shape()) + " does not hold rows of [*, " + std::to_string(p.src.dim(1)) +
                       "] " + std::string(dtype_name(p.src.dtype())));
    if (c.rows < 0 || c.src_begin < 0 || c.src_begin + c.rows > p.src.dim(0))
      throw UsageError(what + "rows [" + std::to_string(c.src_begin) + ", " + std::to_string(c.src_begin + c.rows) +
                       ") are outside the source " + shape_str(p.src.shape()));
  }
}

void check_params(const EditLogitsParams& p) {
  expect_rank("edit_logits", "x", p.x, 2);
  expect_dtype("edit_logits", "x", p.x, DType::kF32);
  expect_rank("edit_logits", "edits", p.edits, 2);
  expect_dtype("edit_logits", "edits", p.edits, DType::kI32);
  if (p.edits.dim(1) != static_cast<int64_t>(sizeof(LogitEdit) / sizeof(int32_t)))
    throw UsageError("edit_logits: edits has rows of " + std::to_string(p.edits.dim(1)) + " words, a LogitEdit is " +
                     std::to_string(sizeof(LogitEdit) / sizeof(int32_t)));
}

void check_params(const MaskLogitsParams& p) {
  expect_rank("mask_logits", "x", p.x, 2);
  expect_dtype("mask_logits", "x", p.x, DType::kF32);
  expect_dtype("mask_logits", "rows", p.rows, DType::kI32);
  expect_rank("mask_logits", "rows", p.rows, 1);
  expect_shape("mask_logits", "allowed", p.allowed, {p.rows.dim(0), (p.x.dim(1) + 31) / 32});
  expect_dtype("mask_logits", "allowed", p.allowed, DType::kI32);
}

void check_params(const RowLogprobsParams& p) {
  expect_rank("row_logprobs", "x", p.x, 2);
  expect_dtype("row_logprobs", "x", p.x, DType::kF32);
  const int64_t R = p.x.dim(0);
  for (const auto& [name, t, dtype] : {std::tuple{"ids", p.ids, DType::kI32}, std::tuple{"top_counts", p.top_counts, DType::kI32}}) {
    expect_shape("row_logprobs", name, t, {R});
    expect_dtype("row_logprobs", name, t, dtype);
  }
  expect_shape("row_logprobs", "logprob", p.logprob, {R});
  expect_dtype("row_logprobs", "logprob", p.logprob, DType::kF32);
  expect_shape("row_logprobs", "rank", p.rank, {R});
  expect_dtype("row_logprobs", "rank", p.rank, DType::kI32);
  expect_rank("row_logprobs", "top_ids", p.top_ids, 2);
  const int64_t N = p.top_ids.dim(1);
  if (p.top_ids.dim(0) != R || N > kDrawMaxTopLogprobs)
    throw UsageError("row_logprobs: top_ids is " + shape_str(p.top_ids.shape()) + ", expected [" + std::to_string(R) +
                     ", at most " + std::to_string(kDrawMaxTopLogprobs) + "]");
  expect_dtype("row_logprobs", "top_ids", p.top_ids, DType::kI32);
  expect_shape("row_logprobs", "top_logprobs", p.top_logprobs, {R, N});
  expect_dtype("row_logprobs", "top_logprobs", p.top_logprobs, DType::kF32);
}

void check_params(const SampleRowsParams& p) {
  expect_rank("sample_rows", "x", p.x, 2);
  expect_dtype("sample_rows", "x", p.x, DType::kF32);
  if (p.x.dim(1) == 0) throw UsageError("sample_rows: x has rows of no values");
  if (p.x.dim(1) > kDrawMaxVocab)
    throw UsageError("sample_rows: x has rows of " + std::to_string(p.x.dim(1)) + " values, more than the " +
                     std::to_string(kDrawMaxVocab) + " the draw's integer weights can add up");
  expect_shape("sample_rows", "rows", p.rows, {p.x.dim(0), static_cast<int64_t>(sizeof(DrawRow) / sizeof(int64_t))});
  expect_dtype("sample_rows", "rows", p.rows, DType::kI64);
  expect_shape("sample_rows", "out", p.out, {p.x.dim(0)});
  expect_dtype("sample_rows", "out", p.out, DType::kI32);
}

void check_params(const CopyRowsParams& p) {
  expect_row_source("copy_rows", p.src);
  for (size_t i = 0; i < p.copies.size(); ++i) {
    const RowCopy& c = p.copies[i];
    const std::string what = "copy_rows: copy " + std::to_string(i) + ": ";
    expect_rows_of(what + "dst", c.dst, p.src);
    if (c.rows < 0 || c.src_row < 0 || c.dst_row < 0 || c.src_row + c.rows > p.src.dim(0) ||
        c.dst_row + c.rows > c.dst.dim(0))
      throw UsageError(what + std::to_string(c.rows) + " rows from row " + std::to_string(c.src_row) + " to row " +
                       std::to_string(c.dst_row) + " do not fit " + shape_str(p.src.shape()) + " -> " +
                       shape_str(c.dst.shape()));
  }
}

void check_params(const DummyWeightParams& p) {
  for (int64_t d : p.shape)
    if (d < 0) throw UsageError("dummy_weight: " + p.name + ": shape " + shape_str(p.shape) + " has a negative dimension");
  if (p.format == WeightFormat::kPlain) {
    if (p.dtype != DType::kBF16 && p.dtype != DType::kF32)
      throw UsageError("dummy_weight: " + p.name + ": plain dummy weights are bf16 or f32, not " +
                       std::string(dtype_name(p.dtype)));
  } else if (p.shape.size() != 2) {
    throw UsageError("dummy_weight: " + p.name + ": a quantised weight must be [out, in], got " + shape_str(p.shape));
  }
  if (!(p.std >= 0) || !std::isfinite(p.mean) || !std::isfinite(p.std))
    throw UsageError("dummy_weight: " + p.name + ": mean " + std::to_string(p.mean) + " and std " +
                     std::to_string(p.std) + " must be finite, std >= 0");
}

void check_params(const EmbedParams& p) {
  expect_rank("embed", "ids", p.ids, 1);
  expect_dtype("embed", "ids", p.ids, DType::kI32);
  expect_rank("embed", "out", p.out, 3);
}

void check_params(const GroupedLinearParams& p) {
  expect_rank("grouped_linear", "x", p.x, 3);
  expect_float("grouped_linear", "x", p.x);
  expect_rank("grouped_linear", "y", p.y, 3);
  expect_float("grouped_linear", "y", p.y);
  const int64_t T = p.x.dim(0), G = p.x.dim(1), R = p.y.dim(2);
  expect_shape("grouped_linear", "y", p.y, {T, G, R});
}

void check_params(const HadamardParams& p) {
  expect_rank("hadamard", "x", p.x, 2);
  expect_float("hadamard", "x", p.x);
  const int64_t n = p.x.dim(1);
  if (n <= 0 || (n & (n - 1)) != 0) throw UsageError("hadamard: width " + std::to_string(n) + " is not a power of two");
}

void check_params(const HcHeadParams& p) {
  expect_rank("hc_head", "x", p.x, 3);
  expect_float("hc_head", "x", p.x);
}

void check_params(const HcPostParams& p) {
  expect_rank("hc_post", "x", p.x, 3);
  expect_float("hc_post", "x", p.x);
  expect_float("hc_post", "a", p.a);
  const int64_t T = p.x.dim(0), n = p.x.dim(1), D = p.x.dim(2);
  expect_shape("hc_post", "a", p.a, {T, D});
  expect_shape("hc_post", "post", p.post, {T, n});
  expect_dtype("hc_post", "post", p.post, DType::kF32);
  expect_shape("hc_post", "comb", p.comb, {T, n, n});
  expect_dtype("hc_post", "comb", p.comb, DType::kF32);
  expect_shape("hc_post", "out", p.out, {T, n, D});
}

void check_params(const HcPreParams& p) {
  expect_rank("hc_pre", "x", p.x, 3);
  expect_float("hc_pre", "x", p.x);
}

void check_params(const IndexerTopkParams& p) {
  expect_rank("indexer_topk", "q", p.q, 3);
  expect_float("indexer_topk", "q", p.q);
  const int64_t T = p.q.dim(0), heads = p.q.dim(1);
  expect_shape("indexer_topk", "weights", p.weights, {T, heads});
  expect_float("indexer_topk", "weights", p.weights);
  expect_rank("indexer_topk", "topk", p.topk, 2);
  expect_dtype("indexer_topk", "topk", p.topk, DType::kI32);
  if (p.topk.dim(0) != T) throw UsageError("indexer_topk: topk must have one row per token");
  if (p.ratio <= 0) throw UsageError("indexer_topk: ratio must be positive");
  expect_shape("indexer_topk", "positions", p.positions, {T});
  expect_dtype("indexer_topk", "positions", p.positions, DType::kI32);
  check_slices("indexer_topk", p.seqs, T);
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const SeqSlice& sl = p.seqs[s].slice;
    expect_readable_cache("indexer_topk: sequence " + std::to_string(s) + "'s keys", p.seqs[s].keys, p.q.dim(2),
                          (sl.start_pos + sl.num_tokens) / p.ratio);
  }
}

void check_params(const LinearParams& p) {
  expect_rank("linear", "x", p.x, 2);
  expect_float("linear", "x", p.x);
  expect_float("linear", "y", p.y);
}

void check_params(const MoeExpertsParams& p) {
  expect_rank("moe_experts", "x", p.x, 2);
  expect_float("moe_experts", "x", p.x);
  const int64_t T = p.x.dim(0), D = p.x.dim(1);
  expect_rank("moe_experts", "experts", p.experts, 2);
  expect_dtype("moe_experts", "experts", p.experts, DType::kI32);
  const int64_t k = p.experts.dim(1);
  expect_shape("moe_experts", "experts", p.experts, {T, k});
  expect_shape("moe_experts", "weights", p.weights, {T, k});
  expect_dtype("moe_experts", "weights", p.weights, DType::kF32);
  if (p.shared != nullptr) {
    const ExpertWeights& s = *p.shared;
    if (s.w1 == nullptr || s.w2 == nullptr || s.w3 == nullptr || s.w1->shape.size() != 2)
      throw UsageError("moe_experts: the shared expert needs w1, w2 and w3");
    const int64_t I = s.w1->shape[0];
    for (const auto& [w, shape] : {std::pair{s.w1, Shape{I, D}}, std::pair{s.w3, Shape{I, D}}, std::pair{s.w2, Shape{D, I}}})
      if (w->shape != shape)
        throw UsageError("moe_experts: shared expert weight " + w->name + " has shape " + shape_str(w->shape) +
                         ", expected " + shape_str(shape));
  }
  expect_shape("moe_experts", "out", p.out, {T, D});
  expect_float("moe_experts", "out", p.out);
  if (p.gate != nullptr) {
    const Weight* g = p.gate->weight;
    const Shape shape{static_cast<int64_t>(p.routed.size()), D};
    if (g == nullptr) throw UsageError("moe_experts: the gate has no weight");
    if (g->shape != shape)
      throw UsageError("moe_experts: gate weight " + g->name + " has shape " + shape_str(g->shape) + ", expected " +
                       shape_str(shape) + " (one row per routed expert)");
  }
}

void check_params(const MoeExpertRowsParams& p) {
  expect_rank("moe_expert_rows", "x", p.x, 2);
  expect_float("moe_expert_rows", "x", p.x);
  const int64_t R = p.x.dim(0), D = p.x.dim(1);
  expect_shape("moe_expert_rows", "experts", p.experts, {R});
  expect_dtype("moe_expert_rows", "experts", p.experts, DType::kI32);
  expect_shape("moe_expert_rows", "weights", p.weights, {R});
  expect_dtype("moe_expert_rows", "weights", p.weights, DType::kF32);
  expect_shape("moe_expert_rows", "out", p.out, {R, D});
  expect_dtype("moe_expert_rows", "out", p.out, p.x.dtype());
}

void check_params(const MoeCombineParams& p) {
  expect_rank("moe_combine", "out", p.out, 2);
  expect_float("moe_combine", "out", p.out);
  const int64_t T = p.out.dim(0), D = p.out.dim(1);
  if (p.k <= 0) throw UsageError("moe_combine: k = " + std::to_string(p.k) + " slots per token (need >= 1)");
  expect_shape("moe_combine", "rows", p.rows, {T * p.k, D});
  expect_float("moe_combine", "rows", p.rows);
  if (!is_empty(p.shared)) {
    expect_shape("moe_combine", "shared", p.shared, {T, D});
    expect_float("moe_combine", "shared", p.shared);
  }
}

void check_params(const MoeRouteParams& p) {
  expect_rank("moe_route", "logits", p.logits, 2);
  expect_dtype("moe_route", "logits", p.logits, DType::kF32);
  const int64_t T = p.logits.dim(0), E = p.logits.dim(1);
  expect_rank("moe_route", "experts", p.experts, 2);
  expect_dtype("moe_route", "experts", p.experts, DType::kI32);
  const int64_t k = p.experts.dim(1);
  expect_shape("moe_route", "experts", p.experts, {T, k});
  expect_shape("moe_route", "weights", p.weights, {T, k});
  expect_dtype("moe_route", "weights", p.weights, DType::kF32);
  if (k > E) throw UsageError("moe_route: cannot pick " + std::to_string(k) + " of " + std::to_string(E) + " experts");
}

void check_params(const NormRopeQuantParams& p) {
  const char* op = "norm_rope_quant";
  expect_rank(op, "src", p.src, 3);
  expect_float(op, "src", p.src);
  expect_shape(op, "y", p.y, p.src.shape());
  expect_float(op, "y", p.y);
  const int64_t rows = p.y.dim(0), dim = p.y.dim(2);
  if (p.norm_weight != nullptr && !p.norm)
    throw UsageError("norm_rope_quant: a norm weight (" + p.norm_weight->name + ") without the norm");
  if (p.rope_dim != 0) {
    if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > dim)
      throw UsageError("norm_rope_quant: rope_dim " + std::to_string(p.rope_dim) + " must be even and at most " +
                       std::to_string(dim));
    expect_shape(op, "positions", p.positions, {rows});
    expect_dtype(op, "positions", p.positions, DType::kI32);
    expect_shape(op, "inv_freq", p.inv_freq, {p.rope_dim / 2});
    expect_dtype(op, "inv_freq", p.inv_freq, DType::kF32);
  }
  if (p.hadamard && (dim <= 0 || (dim & (dim - 1)) != 0))
    throw UsageError("norm_rope_quant: the Hadamard transform's width " + std::to_string(dim) +
                     " is not a power of two");
  if (p.quant_cols != 0 && (p.quant_block <= 0 || p.quant_cols < 0 || p.quant_cols > dim || p.quant_cols % p.quant_block != 0))
    throw UsageError("norm_rope_quant: quant_cols " + std::to_string(p.quant_cols) + " must be a multiple of the block " +
                     std::to_string(p.quant_block) + " and at most the width " + std::to_string(dim));
}

void check_params(const QuantSimParams& p) {
  expect_rank("quant_sim", "x", p.x, 2);
  expect_float("quant_sim", "x", p.x);
  const int64_t width = p.x.dim(1);
  if (p.block <= 0 || p.cols < 0 || p.cols > width || p.cols % p.block != 0)
    throw UsageError("quant_sim: cols " + std::to_string(p.cols) + " must be a multiple of the block " +
                     std::to_string(p.block) + " and at most the width " + std::to_string(width));
}

void check_params(const RmsNormParams& p) {
  expect_rank("rms_norm", "x", p.x, 2);
  expect_float("rms_norm", "x", p.x);
  expect_shape("rms_norm", "y", p.y, p.x.shape());
}

void check_params(const RopeParams& p) {
  expect_rank("rope", "x", p.x, 3);
  expect_float("rope", "x", p.x);
  const int64_t rows = p.x.dim(0), hd = p.x.dim(2), half = p.rope_dim / 2;
  if (p.rope_dim <= 0 || p.rope_dim % 2 != 0 || p.rope_dim > hd)
    throw UsageError("rope: rope_dim " + std::to_string(p.rope_dim) + " must be even and at most " + std::to_string(hd));
  expect_shape("rope", "positions", p.positions, {rows});
  expect_dtype("rope", "positions", p.positions, DType::kI32);
  expect_shape("rope", "inv_freq", p.inv_freq, {half});
  expect_dtype("rope", "inv_freq", p.inv_freq, DType::kF32);
}

void check_params(const SparseAttentionParams& p) {
  expect_rank("sparse_attention", "q", p.q, 3);
  expect_float("sparse_attention", "q", p.q);
  const int64_t T = p.q.dim(0), H = p.q.dim(1), d = p.q.dim(2);
  expect_shape("sparse_attention", "kv", p.kv, {T, d});
  expect_float("sparse_attention", "kv", p.kv);
  expect_shape("sparse_attention", "out", p.out, {T, H, d});
  expect_float("sparse_attention", "out", p.out);
  expect_shape("sparse_attention", "positions", p.positions, {T});
  expect_dtype("sparse_attention", "positions", p.positions, DType::kI32);
  if (!is_empty(p.topk)) {
    expect_rank("sparse_attention", "topk", p.topk, 2);
    expect_dtype("sparse_attention", "topk", p.topk, DType::kI32);
    if (p.topk.dim(0) != T) throw UsageError("sparse_attention: topk must have one row per token");
    if (p.ratio <= 0) throw UsageError("sparse_attention: topk given for a layer without compression");
  }
  if (p.window <= 0) throw UsageError("sparse_attention: window must be positive");
  check_slices("sparse_attention", p.seqs, T);
  if (p.ratio > 0)
    for (size_t s = 0; s < p.seqs.size(); ++s) {
      const SeqSlice& sl = p.seqs[s].slice;
      expect_readable_cache("sparse_attention: sequence " + std::to_string(s) + "'s compressed", p.seqs[s].compressed,
                            d, (sl.start_pos + sl.num_tokens) / p.ratio);
    }
}

void check_params(const SwigluParams& p) {
  expect_rank("swiglu", "gate", p.gate, 2);
  expect_float("swiglu", "gate", p.gate);
  const int64_t T = p.gate.dim(0), I = p.gate.dim(1);
  expect_shape("swiglu", "up", p.up, {T, I});
  expect_float("swiglu", "up", p.up);
  expect_shape("swiglu", "out", p.out, {T, I});
  expect_float("swiglu", "out", p.out);
  if (!is_empty(p.row_weight)) {
    expect_shape("swiglu", "row_weight", p.row_weight, {T});
    expect_dtype("swiglu", "row_weight", p.row_weight, DType::kF32);
  }
}

}  // namespace dsv4
