// The lightning indexer of CSA layers (MODEL.md §5): its own compressor builds the indexer keys
// (compress with CompressorUse::kIndexer, run by the attention layer as a side chain); the query
// side (wq_b on the shared q_norm output, RoPE, Hadamard, FP4 QAT) and the per-head weights score
// every complete block; each token keeps the top index_topk entries.
#pragma once

#include "model/context.h"
#include "model/model_weights.h"

namespace dsv4 {

// The chosen compressed-entry ids [T, index_topk] i32 (ascending, then -1) of layer `layer`, from
// the attention input x [T, D] and the q_norm output qr [T, q_lora]. The indexer keys of the
// batch's completed blocks must already be in the caches (compress, CompressorUse::kIndexer).
DeviceTensor indexer_topk(const ForwardContext& ctx, const IndexerWeights& w, int64_t layer, const DeviceTensor& x,
                          const DeviceTensor& qr, const DeviceTensor& inv_freq);

}  // namespace dsv4
