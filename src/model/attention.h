// The attention sub-layer of every layer kind (MODEL.md §3): the Q path (wq_a, q_norm, wq_b,
// per-head norm, RoPE), the KV path (wkv, kv_norm, RoPE, FP8 QAT), the compressor and the
// indexer of compressed layers, sparse attention with the per-head sink over the SWA window and
// the compressed entries, then inverse RoPE and the grouped wo_a / wo_b output projection.
#pragma once

#include <string_view>

#include "model/context.h"
#include "model/model_weights.h"

namespace dsv4 {

// The chain name of the layer's second fork/join (ForkJoinTasks::chain): the output projections
// beside the window write. The first is named by the layer kind.
inline constexpr std::string_view kOutputChain = "attn-output";

// The attention output [T, D] of layer `layer` (0..L-1 main, L.. MTP) for its input x [T, D]
// (the attn_norm output). Updates the layer's caches of every sequence in the batch.
DeviceTensor attention(const ForwardContext& ctx, const AttentionWeights& w, int64_t layer, const DeviceTensor& x,
                       const DeviceTensor& inv_freq);

}  // namespace dsv4
