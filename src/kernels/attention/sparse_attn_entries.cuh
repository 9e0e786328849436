// The entry list of one query token of sparse attention (MODEL.md §3.5-3.6), shared by the
// kernels behind CudaOps::sparse_attention: its window positions max(0, p-W+1)..p (the older
// ones in the sequence's window ring, the batch's own in its kv rows), then its compressed
// entries: none (ratio 0), all visible ones (no top-k), or the listed ids (-1 and ids not yet
// visible are invalid), found through the sequence's block table (an entry without a pool row,
// in a -1 page or past the table, is invalid: nothing outside the table or pool is read).
#pragma once

#include <cstdint>

#include "kernels/attention/sparse_attn_rows.h"

namespace dsv4::kernels {

// Where entry e of a token reads its row: row `row` of `rows`, unless it is invalid; with packed
// entries, entry `row` of pages of `page_rows` entries at `rows`.
struct EntrySource {
  FloatPtr rows;
  int64_t row = 0;
  bool valid = false;
  int64_t page_rows = 0;
};

// Entry e of batch token t of sequence s, at position pos.
__device__ inline EntrySource entry_source(const SparseAttnRowsParams& p, const SparseAttnSeq& s, int64_t t, int64_t pos,
                                           int64_t e) {
  const int64_t lo = pos - p.window_size + 1 > 0 ? pos - p.window_size + 1 : 0;
  const int64_t nwin = pos - lo + 1;
  if (e < nwin) {
    const int64_t q = lo + e;
    const int64_t start_pos = p.positions[s.token_begin];
    if (q >= start_pos) return {p.kv, s.token_begin + q - start_pos, true, p.kv_page_rows};
    return {s.window, q % p.window_size, true, s.window_rows};
  }
  const int64_t c = e - nwin;
  const int64_t j = p.topk == nullptr ? c : p.topk[t * p.k + c];
  if (p.topk != nullptr && j >= (pos + 1) / p.ratio) return {s.compressed, 0, false};
  const int64_t row = pool_row(s.compressed_pages, j);
  return {s.compressed, row, row >= 0, s.compressed_pages.page_rows};
}

// The number of entries (valid or not) of a token at position pos.
__device__ inline int64_t entry_count(const SparseAttnRowsParams& p, int64_t pos) {
  const int64_t lo = pos - p.window_size + 1 > 0 ? pos - p.window_size + 1 : 0;
  int64_t n = pos - lo + 1;
  if (p.ratio > 0) n += p.topk != nullptr ? p.k : (pos + 1) / p.ratio;
  return n;
}

}  // namespace dsv4::kernels
