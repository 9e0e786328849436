// CudaOps attention family: the compressor's gated pooling with its per-sequence state rings
// (MODEL.md §4), the lightning indexer's scores and top-k (§5), and sparse attention with the
// per-head sink over the window and the compressed entries (§3.5-3.6). Arguments are checked as
// CpuOps checks them; kernels run one launch per sequence on the op's stream.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "kernels/attention/sparse_attn_rows.h"
#include "kernels/compressor/compressor_pool.h"
#include "kernels/indexer/indexer_topk.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

// Checks that the sequences' slices lie inside the batch and cover each of its T tokens once.
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

// A [capacity, width] float cache that must hold `rows` entries.
void check_cache(const char* op, ConstTensorView cache, int64_t rows, int64_t width) {
  expect_rank(op, "cache", cache, 2);
  expect_float(op, "cache", cache);
  if (cache.dim(1) != width || cache.dim(0) < rows)
    throw UsageError(std::string(op) + ": a cache of shape " + shape_str(cache.shape()) + " cannot hold " +
                     std::to_string(rows) + " entries of width " + std::to_string(width));
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
    const int64_t blocks = (sl.start_pos + sl.num_tokens) / m - sl.start_pos / m;
    if (blocks > 0 && (s.out_begin < 0 || s.out_begin + blocks > p.out.dim(0)))
      throw UsageError("compressor_pool: out has too few rows for the completed blocks");
    kernels::CompressorPoolParams k;
    k.kv = p.kv.data<float>() + sl.token_begin * width;
    k.score = p.score.data<float>() + sl.token_begin * width;
    k.ape = ape;
    k.state_kv = s.state_kv.data<float>();
    k.state_score = s.state_score.data<float>();
    k.out = p.out.data<float>() + (blocks > 0 ? s.out_begin * dc : 0);
    k.width = width;
    k.ratio = m;
    k.start_pos = sl.start_pos;
    k.num_tokens = sl.num_tokens;
    kernels::compressor_pool(k, stream_);
  }
}

void CudaOps::indexer_topk(const IndexerTopkParams& p) {
  check_params(p);
  const int64_t T = p.q.dim(0), heads = p.q.dim(1), dh = p.q.dim(2);
  const int64_t k = p.topk.dim(1);
  check_slices("indexer_topk", p.seqs, T);

  int64_t scratch = 0;
  for (const IndexerSeq& s : p.seqs) {
    const int64_t visible = (s.slice.start_pos + s.slice.num_tokens) / p.ratio;
    check_cache("indexer_topk", s.keys, visible, dh);
    scratch = std::max(scratch, s.slice.num_tokens * visible);
  }
  // Sequences run one after another on the stream, so they can share the score scratch.
  const StreamBuffer scores(static_cast<size_t>(scratch) * sizeof(float), stream_);
  for (const IndexerSeq& s : p.seqs) {
    const SeqSlice& sl = s.slice;
    if (sl.num_tokens == 0) continue;
    kernels::IndexerTopkParams kp;
    kp.q = float_ptr(slice_rows(p.q, sl.token_begin, sl.token_begin + sl.num_tokens));
    kp.weights = float_ptr(slice_rows(p.weights, sl.token_begin, sl.token_begin + sl.num_tokens));
    kp.keys = float_ptr(s.keys);
    kp.scores = scores.get<float>();
    kp.topk = p.topk.data<int32_t>() + sl.token_begin * k;
    kp.weight_scale = p.weight_scale;
    kp.heads = heads;
    kp.dh = dh;
    kp.ratio = p.ratio;
    kp.start_pos = sl.start_pos;
    kp.num_tokens = sl.num_tokens;
    kp.score_stride = (sl.start_pos + sl.num_tokens) / p.ratio;
    kp.k = k;
    kernels::indexer_topk(kp, stream_);
  }
}

void CudaOps::sparse_attention(const SparseAttentionParams& p) {
  check_params(p);
  const int64_t T = p.q.dim(0), H = p.q.dim(1), d = p.q.dim(2), W = p.window;
  const kernels::FloatPtr sink = weight_floats("sparse_attention", p.sink, {H});
  const bool has_topk = !is_empty(p.topk);
  check_slices("sparse_attention", p.seqs, T);
  for (const AttentionSeq& s : p.seqs) {
    if (s.slice.start_pos > 0) check_cache("sparse_attention", s.window, W, d);
    if (p.ratio > 0) check_cache("sparse_attention", s.compressed, (s.slice.start_pos + s.slice.num_tokens) / p.ratio, d);
  }
  const int64_t k = has_topk ? p.topk.dim(1) : 0;

  for (const AttentionSeq& s : p.seqs) {
    const SeqSlice& sl = s.slice;
    if (sl.num_tokens == 0) continue;
    const int64_t b = sl.token_begin, e = sl.token_begin + sl.num_tokens;
    kernels::SparseAttnRowsParams kp;
    kp.q = float_ptr(slice_rows(p.q, b, e));
    kp.kv = float_ptr(slice_rows(p.kv, b, e));
    if (sl.start_pos > 0) kp.window = float_ptr(s.window);
    if (p.ratio > 0) kp.compressed = float_ptr(s.compressed);
    kp.topk = has_topk ? p.topk.data<int32_t>() + b * k : nullptr;
    kp.sink = sink;
    kp.out = float_ptr(slice_rows(p.out, b, e));
    kp.heads = H;
    kp.d = d;
    kp.window_size = W;
    kp.ratio = p.ratio;
    kp.k = k;
    kp.start_pos = sl.start_pos;
    kp.num_tokens = sl.num_tokens;
    kp.softmax_scale = p.softmax_scale;
    kernels::sparse_attn_rows(kp, stream_);
  }
}

}  // namespace dsv4::cuda
