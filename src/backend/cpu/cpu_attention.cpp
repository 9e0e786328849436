// CpuOps attention family: the compressor's gated pooling with its per-sequence state rings
// (MODEL.md §4), the lightning indexer's scores and top-k (§5), and sparse attention with the
// per-head sink over the window and the compressed entries (§3.5-3.6). Compressed entries and
// indexer keys are gathered through the sequences' block tables (kv/page_table.h) first, packed
// caches (kv/packed_entries.h) decoded on the way.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_io.h"
#include "backend/cpu/indexer_scores.h"
#include "kv/packed_entries.h"
#include "ops/param_checks.h"

namespace dsv4::cpu {

namespace {

// The sequence a batch token belongs to, and its position.
struct TokenPlace {
  int64_t seq;
  int64_t pos;
};

// Each token's sequence and position (check_params has checked that the slices cover the batch).
template <typename Seq>
std::vector<TokenPlace> place_tokens(std::span<const Seq> seqs, int64_t T) {
  std::vector<TokenPlace> places(static_cast<size_t>(T));
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqSlice& sl = seqs[s].slice;
    for (int64_t i = 0; i < sl.num_tokens; ++i)
      places[static_cast<size_t>(sl.token_begin + i)] = {static_cast<int64_t>(s), sl.start_pos + i};
  }
  return places;
}

// Row `row` of a cache tensor as fp32: float rows, or packed entries (kv/packed_entries.h) in
// pages of `page_rows` (the tensor's rows are its pages' entries in order).
void load_cache_row(ConstTensorView cache, int64_t page_rows, int64_t row, float* out) {
  const int64_t stored_width = cache.dim(cache.rank() - 1);
  const auto* bytes = reinterpret_cast<const uint8_t*>(cache.bytes());
  switch (packed_entry(cache.dtype(), stored_width)) {
    case PackedEntry::kFp8Attention: {
      // e4m3_to_float's values, looked up: its ldexpf per element would cost a decode step more
      // than its attention.
      static const std::array<float, 256> e4m3 = [] {
        std::array<float, 256> values{};
        for (int code = 0; code < 256; ++code) values[static_cast<size_t>(code)] = e4m3_to_float(static_cast<uint8_t>(code));
        return values;
      }();
      decode_fp8_entry(bytes, Fp8CacheLayout{static_cast<int>(page_rows)}, row, out,
                       [](uint8_t code) { return e4m3[code]; });
      return;
    }
    case PackedEntry::kMxfp4Key:
      decode_mxfp4_key(bytes, Mxfp4KeyLayout{static_cast<int>(page_rows)}, row, out);
      return;
    case PackedEntry::kNone:
      load_floats(cache, row * stored_width, stored_width, out);
      return;
  }
}

// The rows [0, rows) of a [capacity, width] cache (float rows, or packed entries as one page) as
// fp32.
std::vector<float> load_cache_rows(const char* op, ConstTensorView cache, int64_t rows, int64_t width) {
  expect_rank(op, "cache", cache, 2);
  if (!cache_rows_hold(cache.dtype(), cache.dim(1), width) || cache.dim(0) < rows)
    throw UsageError(std::string(op) + ": a cache of " + std::string(dtype_name(cache.dtype())) +
                     shape_str(cache.shape()) + " cannot hold " + std::to_string(rows) + " entries of width " +
                     std::to_string(width));
  std::vector<float> out(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) load_cache_row(cache, cache.dim(0), r, out.data() + r * width);
  return out;
}

// Entries [0, entries) of a paged cache (check_params has checked its shape and that its table
// reaches them) as fp32 rows; absent entries are zero rows with present[j] = 0.
struct PagedEntries {
  std::vector<float> rows;    // [entries, width]
  std::vector<char> present;  // [entries]
};

PagedEntries load_paged_entries(const PagedCache& cache, int64_t entries) {
  const int64_t width = unpacked_width(cache.pool.dtype(), cache.pool.dim(2));
  const PageTable table = page_table(cache);
  PagedEntries out{std::vector<float>(static_cast<size_t>(entries * width), 0.0f),
                   std::vector<char>(static_cast<size_t>(entries), 0)};
  for (int64_t j = 0; j < entries; ++j) {
    const int64_t row = pool_row(table, j);
    if (row < 0) continue;
    load_cache_row(cache.pool, table.page_rows, row, out.rows.data() + j * width);
    out.present[static_cast<size_t>(j)] = 1;
  }
  return out;
}

}  // namespace

void indexer_score_row(const float* q, const float* w, float weight_scale, const float* keys, int64_t visible,
                       int64_t heads, int64_t dh, float* score) {
  for (int64_t j = 0; j < visible; ++j) {
    float acc = 0;
    for (int64_t h = 0; h < heads; ++h) {
      const float qk = dot(q + h * dh, keys + j * dh, dh);
      acc += (w[h] * weight_scale) * std::fmax(qk, 0.0f);
    }
    score[j] = std::isnan(acc) ? -std::numeric_limits<float>::infinity() : acc;
  }
}

void CpuOps::compressor_pool(const CompressorPoolParams& p) {
  check_params(p);
  const int64_t T = p.kv.dim(0), width = p.kv.dim(1), m = p.ratio;
  const bool overlap = m == 4;
  const int64_t coff = overlap ? 2 : 1, dc = width / coff, ring = coff * m;
  expect_shape("compressor_pool", "score", p.score, {T, width});
  expect_dtype("compressor_pool", "score", p.score, DType::kF32);
  const float* ape = weight_f32("compressor_pool", p.ape, {m, width});
  expect_rank("compressor_pool", "out", p.out, 2);
  expect_dtype("compressor_pool", "out", p.out, DType::kF32);
  if (p.out.dim(1) != dc) throw UsageError("compressor_pool: out must have " + std::to_string(dc) + " columns");
  const float* kv = p.kv.data<float>();
  const float* score = p.score.data<float>();
  float* out = p.out.data<float>();

  for (const CompressorSeq& s : p.seqs) {
    expect_shape("compressor_pool", "state_kv", s.state_kv, {ring, width});
    expect_shape("compressor_pool", "state_score", s.state_score, {ring, width});
    expect_dtype("compressor_pool", "state_kv", s.state_kv, DType::kF32);
    expect_dtype("compressor_pool", "state_score", s.state_score, DType::kF32);
    float* skv = s.state_kv.data<float>();
    float* ssc = s.state_score.data<float>();
    const int64_t first_block = s.slice.start_pos / m;
    std::fill_n(out + s.out_begin * dc, compressor_block_rows(s.slice.num_tokens, m) * dc, 0.0f);
    for (int64_t i = 0; i < s.slice.num_tokens; ++i) {
      const int64_t t = s.slice.token_begin + i, pos = s.slice.start_pos + i, slot = pos % ring;
      if (t < 0 || t >= T) throw UsageError("compressor_pool: token " + std::to_string(t) + " outside the batch");
      for (int64_t c = 0; c < width; ++c) {
        skv[slot * width + c] = kv[t * width + c];
        ssc[slot * width + c] = score[t * width + c] + ape[(pos % m) * width + c];
      }
      if ((pos + 1) % m != 0) continue;
      // Block j's rows: with overlap, the previous block's first half (absent for j = 0) then this
      // block's second half; without, this block's rows. Softmax over rows per channel.
      const int64_t j = pos / m;
      std::vector<const float*> kv_rows, score_rows;
      if (overlap && j >= 1)
        for (int64_t r = 0; r < m; ++r) {
          const int64_t sl = ((j - 1) * m + r) % ring;
          kv_rows.push_back(skv + sl * width);
          score_rows.push_back(ssc + sl * width);
        }
      const int64_t half = overlap ? dc : 0;
      for (int64_t r = 0; r < m; ++r) {
        const int64_t sl = (j * m + r) % ring;
        kv_rows.push_back(skv + sl * width + half);
        score_rows.push_back(ssc + sl * width + half);
      }
      float* o = out + (s.out_begin + j - first_block) * dc;
      std::vector<float> e(kv_rows.size());
      for (int64_t c = 0; c < dc; ++c) {
        float mx = -std::numeric_limits<float>::infinity();
        for (const float* sr : score_rows) mx = std::fmax(mx, sr[c]);
        float sum = 0;
        for (size_t r = 0; r < e.size(); ++r) sum += (e[r] = std::exp(score_rows[r][c] - mx));
        float acc = 0;
        for (size_t r = 0; r < e.size(); ++r) acc += kv_rows[r][c] * (e[r] / sum);
        o[c] = acc;
      }
    }
  }
}

void CpuOps::indexer_topk(const IndexerTopkParams& p) {
  check_params(p);
  const int64_t T = p.q.dim(0), heads = p.q.dim(1), dh = p.q.dim(2);
  const int64_t k = p.topk.dim(1);
  const std::vector<TokenPlace> places = place_tokens(p.seqs, T);

  std::vector<PagedEntries> keys(p.seqs.size());
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const SeqSlice& sl = p.seqs[s].slice;
    keys[s] = load_paged_entries(p.seqs[s].keys, (sl.start_pos + sl.num_tokens) / p.ratio);
  }
  const std::vector<float> q = load_all(p.q);
  const std::vector<float> w = load_all(p.weights);
  int32_t* out = p.topk.data<int32_t>();
  pool_.parallel_for(T, [&](int64_t t) {
    const TokenPlace tp = places[static_cast<size_t>(t)];
    const int64_t visible = (tp.pos + 1) / p.ratio;
    const PagedEntries& key = keys[static_cast<size_t>(tp.seq)];
    std::vector<float> score(static_cast<size_t>(visible));
    indexer_score_row(q.data() + t * heads * dh, w.data() + t * heads, p.weight_scale, key.rows.data(), visible, heads,
                      dh, score.data());
    for (int64_t j = 0; j < visible; ++j)
      if (!key.present[static_cast<size_t>(j)]) score[j] = -std::numeric_limits<float>::infinity();
    std::vector<int32_t> ids(static_cast<size_t>(visible));
    std::iota(ids.begin(), ids.end(), 0);
    if (visible > k) {
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return score[a] > score[b] || (score[a] == score[b] && a < b);
      });
      ids.resize(static_cast<size_t>(k));
      std::sort(ids.begin(), ids.end());
    }
    int32_t* row = out + t * k;
    for (int64_t i = 0; i < k; ++i) row[i] = i < static_cast<int64_t>(ids.size()) ? ids[i] : -1;
  });
}

void CpuOps::sparse_attention(const SparseAttentionParams& p) {
  check_params(p);
  const int64_t T = p.q.dim(0), H = p.q.dim(1), d = p.q.dim(2), W = p.window;
  const float* sink = weight_f32("sparse_attention", p.sink, {H});
  const bool has_topk = !is_empty(p.topk);
  const std::vector<TokenPlace> places = place_tokens(p.seqs, T);

  std::vector<std::vector<float>> windows(p.seqs.size());
  std::vector<PagedEntries> compressed(p.seqs.size());
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const SeqSlice& sl = p.seqs[s].slice;
    if (sl.start_pos > 0) windows[s] = load_cache_rows("sparse_attention", p.seqs[s].window, W, d);
    if (p.ratio > 0) compressed[s] = load_paged_entries(p.seqs[s].compressed, (sl.start_pos + sl.num_tokens) / p.ratio);
  }
  const std::vector<float> kv = load_all(p.kv);
  const std::vector<float> q = load_all(p.q);
  const int64_t k = has_topk ? p.topk.dim(1) : 0;
  const int32_t* topk = has_topk ? p.topk.data<int32_t>() : nullptr;

  pool_.parallel_for(T, [&](int64_t t) {
    const TokenPlace tp = places[static_cast<size_t>(t)];
    const SeqSlice& sl = p.seqs[static_cast<size_t>(tp.seq)].slice;
    std::vector<const float*> entries;
    for (int64_t pos = std::max<int64_t>(0, tp.pos - W + 1); pos <= tp.pos; ++pos)
      entries.push_back(pos >= sl.start_pos ? kv.data() + (sl.token_begin + pos - sl.start_pos) * d
                                            : windows[static_cast<size_t>(tp.seq)].data() + (pos % W) * d);
    if (p.ratio > 0) {
      const int64_t visible = (tp.pos + 1) / p.ratio;
      const PagedEntries& comp = compressed[static_cast<size_t>(tp.seq)];
      const auto attend = [&](int64_t j) {
        if (comp.present[static_cast<size_t>(j)]) entries.push_back(comp.rows.data() + j * d);
      };
      if (has_topk) {
        for (int64_t i = 0; i < k; ++i) {
          const int32_t j = topk[t * k + i];
          if (j < 0) continue;
          if (j >= visible)
            throw UsageError("sparse_attention: token " + std::to_string(t) + " at position " + std::to_string(tp.pos) +
                             " selects compressed entry " + std::to_string(j) + " of only " + std::to_string(visible));
          attend(j);
        }
      } else {
        for (int64_t j = 0; j < visible; ++j) attend(j);
      }
    }
    const size_t S = entries.size();
    std::vector<float> z(S), o(static_cast<size_t>(d));
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (t * H + h) * d;
      float mx = -std::numeric_limits<float>::infinity();
      for (size_t e = 0; e < S; ++e) {
        z[e] = dot(qh, entries[e], d) * p.softmax_scale;
        mx = std::fmax(mx, z[e]);
      }
      float sum = 0;
      for (size_t e = 0; e < S; ++e) sum += (z[e] = std::exp(z[e] - mx));
      const float den = sum + std::exp(sink[h] - mx);
      std::fill(o.begin(), o.end(), 0.0f);
      for (size_t e = 0; e < S; ++e) {
        const float wgt = z[e] / den;
        const float* v = entries[e];
        for (int64_t c = 0; c < d; ++c) o[c] += wgt * v[c];
      }
      store_floats(p.out, (t * H + h) * d, d, o.data());
    }
  });
}

}  // namespace dsv4::cpu
