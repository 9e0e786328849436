// The lightning indexer (MODEL.md §5.2) for one sequence's slice of a batch: scores
// I[t, j] = sum_h (w[t, h] * weight_scale) * relu(q[t, h] . k[j]) over the entries complete at
// the token's position, j < floor((p + 1) / ratio), then the top k of each row (ties: lower j
// first), written as ids ascending then -1.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

struct IndexerTopkParams {
  FloatPtr q;                 // [slice tokens, heads, dh]
  FloatPtr weights;           // [slice tokens, heads]
  FloatPtr keys;              // [>= max visible, dh] the sequence's indexer keys, entry j in row j
  float* scores = nullptr;    // [slice tokens, score_stride] scratch
  int32_t* topk = nullptr;    // [slice tokens, k]
  float weight_scale = 0;
  int64_t heads = 0;
  int64_t dh = 0;
  int64_t ratio = 0;
  int64_t start_pos = 0;      // position of the slice's first token
  int64_t num_tokens = 0;
  int64_t score_stride = 0;   // >= (start_pos + num_tokens) / ratio
  int64_t k = 0;
};

// Dynamic shared memory the score kernel needs (the token's queries and head weights).
size_t indexer_scores_smem_bytes(int64_t heads, int64_t dh);

void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
