// The indexer's tensor-core score kernel (IndexerScoreKernel::kTensorCoreBf16), launched by
// kernels::indexer_scores.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/indexer/indexer_topk.h"

namespace dsv4::kernels {

// Dynamic shared memory of one CTA for `heads` heads (its queries, two stages of keys, the
// per-head terms of a key tile and the head weights; with packed keys two stages of their bytes).
size_t indexer_mma_scores_smem_bytes(int64_t heads, bool packed_keys);

// Writes p.scores for every token's visible entries. Needs bf16 q and keys (every sequence's
// keys pointer 16-byte aligned, as are q's) or packed MXFP4 keys (p.packed_keys), dh ==
// kIndexerMmaHeadDim and 1 <= heads <= kIndexerMmaMaxHeads; throws UsageError otherwise.
void indexer_mma_scores(const IndexerTopkParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
