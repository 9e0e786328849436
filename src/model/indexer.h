// The lightning indexer of CSA layers (MODEL.md §5): its own compressor builds the indexer keys
// (compress with CompressorUse::kIndexer, run by the attention layer as a side chain); the query
// side (wq_b on the shared q_norm output, RoPE, Hadamard, FP4 QAT) and the per-head weights score
// every complete block; each token keeps the top index_topk entries.
#pragma once

#include "model/context.h"
#include "model/model_weights.h"

namespace dsv4 {

// The indexer's query side of a batch: the queries [T, heads, dh] (wq_b on qr, RoPE, Hadamard,
// FP4 QAT) and the per-head weights [T, heads]. It reads no cache, so the attention layer runs it
// beside the compressors.
struct IndexerQuery {
  DeviceTensor q;
  DeviceTensor weights;
};

// The query side from the attention input x [T, D] and the q_norm output qr [T, q_lora].
IndexerQuery indexer_query(const ForwardContext& ctx, const IndexerWeights& w, const DeviceTensor& x,
                           const DeviceTensor& qr, const DeviceTensor& inv_freq);

// The chosen compressed-entry ids [T, index_topk] i32 (ascending, then -1) of layer `layer` for
// the queries `query`. The indexer keys of the batch's completed blocks must already be in the
// caches (compress, CompressorUse::kIndexer).
DeviceTensor indexer_topk(const ForwardContext& ctx, int64_t layer, const IndexerQuery& query);

}  // namespace dsv4
