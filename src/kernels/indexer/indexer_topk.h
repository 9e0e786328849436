// The lightning indexer (MODEL.md §5.2) for a whole batch: scores
// I[t, j] = sum_h (w[t, h] * weight_scale) * relu(q[t, h] . k[j]) over the entries complete at
// the token's position, j < floor((p + 1) / ratio), then the top k of each row (ties: lower j
// first), written as ids ascending then -1.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

// One sequence of the batch (device memory).
struct IndexerSeqDesc {
  int64_t token_begin = 0;    // the batch row of its first token
  int64_t start_pos = 0;      // position of its first token
  FloatPtr keys;              // [>= visible entries, dh] its indexer keys, entry j in row j
};

// The whole batch in one launch per kernel; each token finds its sequence through seq_of_token.
struct IndexerTopkParams {
  FloatPtr q;                 // [tokens, heads, dh]
  FloatPtr weights;           // [tokens, heads]
  const IndexerSeqDesc* seqs = nullptr;    // device
  const int32_t* seq_of_token = nullptr;   // [tokens] device
  float* scores = nullptr;    // [tokens, score_stride] scratch; row t valid at [0, visible(t))
  int32_t* topk = nullptr;    // [tokens, k]
  float weight_scale = 0;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t dh = 0;
  int64_t ratio = 0;
  int64_t score_stride = 0;   // >= every token's visible entries, (position + 1) / ratio
  int64_t k = 0;
};

// Dynamic shared memory the score kernel needs (the token's queries and head weights).
size_t indexer_scores_smem_bytes(int64_t heads, int64_t dh);

// The scores of every token's visible entries.
void indexer_scores(const IndexerTopkParams& p, cudaStream_t stream);

// Each token's top k from p.scores: ids ascending, then -1 where fewer than k entries are visible.
void indexer_select_topk(const IndexerTopkParams& p, cudaStream_t stream);

// indexer_scores, then indexer_select_topk.
void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
