// Sparse attention with a per-head sink (MODEL.md §3.5-3.6) over plain fp32/bf16 rows, for every
// sequence of a batch at once: query t at position p attends to the window positions
// max(0, p-W+1)..p (older ones from the sequence's window ring, the batch's own from its kv
// rows), then to compressed entries: none (ratio 0), all j < floor((p+1)/ratio) (no topk), or
// the listed ids (topk; -1 and ids not yet visible are skipped), each read through its
// sequence's block table (entries without a pool row are skipped). K = V = the entry row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"
#include "kv/page_table.h"

namespace dsv4::kernels {

// One sequence of the batch (device memory; the launcher's caller uploads the table). It holds
// nothing that changes from one decode step to the next (positions come from `positions`), so a
// CUDA graph can keep the table it was captured with.
struct SparseAttnSeq {
  int64_t token_begin = 0;        // the batch row of its first token
  FloatPtr window;                // [window_rows, d] ring, position p in row p % window_size;
                                  // read only for positions before its first token's
  int64_t window_rows = 0;        // the ring's rows (>= window_size): with packed entries, its page
  FloatPtr compressed;            // [pool rows, d] the compressed pool; read if ratio > 0
  PageTable compressed_pages;     // entry j in pool row pool_row(compressed_pages, j) (device
                                  // table, plan data); entries without a row are absent
};

// The whole batch in one launch: a CTA per (token, group of heads), each finding its sequence
// through seq_of_token.
struct SparseAttnRowsParams {
  FloatPtr q;                     // [tokens, heads, d]
  FloatPtr kv;                    // [tokens, d] the batch's own window rows
  // The window rings, compressed pools and kv hold packed FP8 attention entries
  // (kv/packed_entries.h) instead of rows: each ring one page of window_rows entries, each pool
  // pages of its table's page_rows, kv one page of kv_page_rows >= tokens. Only the tensor-core
  // kernels (sparse_attn_mma) read them.
  bool packed = false;
  int64_t kv_page_rows = 0;
  const SparseAttnSeq* seqs = nullptr;     // device
  const int32_t* seq_of_token = nullptr;   // [tokens] device: index into seqs
  const int32_t* positions = nullptr;      // [tokens] device: each token's position
  const int32_t* topk = nullptr;  // [tokens, k] or nullptr (all visible entries)
  FloatPtr sink;                  // [heads]
  MutFloatPtr out;                // [tokens, heads, d]
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t d = 0;
  int64_t window_size = 0;        // W
  int64_t ratio = 0;              // 0: no compressed entries
  int64_t k = 0;                  // topk's row length
  float softmax_scale = 0;
};

// Dynamic shared memory the kernel needs for head dim d (the launcher rejects more than the
// device allows).
size_t sparse_attn_rows_smem_bytes(int64_t d);

void sparse_attn_rows(const SparseAttnRowsParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
