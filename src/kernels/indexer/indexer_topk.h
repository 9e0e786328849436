// The lightning indexer (MODEL.md §5.2) for a whole batch: scores
// I[t, j] = sum_h (w[t, h] * weight_scale) * relu(q[t, h] . k[j]) over the entries complete at
// the token's position, j < floor((p + 1) / ratio), then the top k of each row (ties: lower j
// first), written as ids ascending then -1. Keys are read through each sequence's block table; an
// absent key scores -inf. Two score kernels (IndexerScoreKernel), one top-k.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"
#include "kv/page_table.h"

namespace dsv4::kernels {

// How the scores are computed. Both sum the heads in head order as CpuOps does; they differ in
// how each q.k dot product is summed.
enum class IndexerScoreKernel {
  // One thread per (token, entry) on CUDA cores, each dot in CpuOps' order (8 running partial
  // sums combined pairwise): the scores equal CpuOps' bit for bit for any fp32 or bf16 input.
  kExact,
  // mma.sync on bf16 q and keys (exact products, fp32 sums): a CTA streams a tile of keys
  // through shared memory once for all heads of a token. Equal to CpuOps' scores whenever every
  // partial sum of a dot is exact in fp32, which FP4-QAT'd q and keys (the default numerics)
  // satisfy: see indexer_mma_scores.cu.
  kTensorCoreBf16,
};

const char* indexer_score_kernel_name(IndexerScoreKernel kernel);

// The tensor-core kernel's shape: head dim 128 (Hadamard128, MODEL.md §5.2) and at most 64 heads
// (one token's heads are the rows of one CTA's MMA tile).
constexpr int64_t kIndexerMmaHeadDim = 128;
constexpr int64_t kIndexerMmaMaxHeads = 64;

// The kernel CudaOps uses: tensor cores where q is bf16, every sequence's keys are bf16 or packed
// (the default numerics) and the shape fits them; the exact kernel otherwise (fp32, the
// exact-math mode).
IndexerScoreKernel indexer_score_kernel_for(bool q_bf16, bool keys_bf16_or_packed, int64_t heads, int64_t dh);

// One sequence of the batch (device memory): nothing that changes between decode steps, so a
// CUDA graph can keep it.
struct IndexerSeqDesc {
  int64_t token_begin = 0;    // the batch row of its first token
  FloatPtr keys;              // [pool rows, dh] the indexer-key pool, or with packed keys its
                              // pages of MXFP4 keys (kv/packed_entries.h; key_pages' page_rows a page)
  PageTable key_pages;        // key j in pool row pool_row(key_pages, j) (device table, plan
                              // data); a key without a row scores -inf
};

// The whole batch in one launch per kernel; each token finds its sequence through seq_of_token.
struct IndexerTopkParams {
  FloatPtr q;                 // [tokens, heads, dh]
  FloatPtr weights;           // [tokens, heads]
  const IndexerSeqDesc* seqs = nullptr;    // device
  const int32_t* seq_of_token = nullptr;   // [tokens] device
  const int32_t* positions = nullptr;      // [tokens] device: each token's position
  float* scores = nullptr;    // [tokens, score_stride] scratch; row t valid at [0, visible(t))
  int32_t* topk = nullptr;    // [tokens, k]
  float weight_scale = 0;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t dh = 0;
  int64_t ratio = 0;
  int64_t score_stride = 0;   // >= every token's visible entries, (position + 1) / ratio
  int64_t k = 0;
  IndexerScoreKernel score_kernel = IndexerScoreKernel::kExact;
  // Every sequence's keys are packed MXFP4 keys (only the tensor-core score kernel reads them).
  bool packed_keys = false;
  // CTAs a token's top-k is split over (1, 2, 4 or 8: a thread block cluster); 0 picks by the
  // batch and the row length (indexer_topk_ctas_for).
  int topk_ctas = 0;
};

// The CTAs the top-k splits a token's rows of up to score_stride keys over: one where one CTA's
// registers hold a row (2,560 keys), else as many as hold it in theirs (2,048 keys each), up to 8,
// fewer where tokens x CTAs would pass 128 blocks (the batch fills the GPU).
int indexer_topk_ctas_for(int64_t tokens, int64_t score_stride);

// Dynamic shared memory the exact score kernel needs (the token's queries and head weights).
size_t indexer_scores_smem_bytes(int64_t heads, int64_t dh);

// The scores of every token's visible entries, by p.score_kernel.
void indexer_scores(const IndexerTopkParams& p, cudaStream_t stream);

// Each token's top k from p.scores: ids ascending, then -1 where fewer than k entries are visible.
void indexer_select_topk(const IndexerTopkParams& p, cudaStream_t stream);

// indexer_scores, then indexer_select_topk.
void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
