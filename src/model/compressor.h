// The compressor (MODEL.md §4): gated pooling of every m tokens of a sequence into one entry,
// overlapping for m = 4, with partial state carried across forwards; then RMSNorm, RoPE at the
// block's start position, and the QAT rounding of its use. The attention compressor's entries
// go to the layer's compressed cache, the indexer compressor's to its indexer keys.
#pragma once

#include "model/context.h"
#include "model/model_weights.h"

namespace dsv4 {

enum class CompressorUse {
  kAttention,  // dc = head_dim; FP8 QAT (block 64) on the nope dims
  kIndexer,    // dc = index_head_dim; Hadamard, then FP4 QAT (block 32)
};

// Runs the compressor of main/MTP layer `layer` over the batch's attention input x [T, D],
// appending the entries of every block the batch completes to each sequence's cache.
void compress(const ForwardContext& ctx, const CompressorWeights& w, int64_t layer, CompressorUse use,
              const DeviceTensor& x, const DeviceTensor& inv_freq);

}  // namespace dsv4
