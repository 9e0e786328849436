// The MoE sub-layer (MODEL.md §6): routing by token-id hash table (the first num_hash_layers
// layers) or by top-k of sqrt-softplus scores plus a selection-only bias, weights from the
// unbiased scores normalised and scaled, routed experts with clamped SwiGLU, and the shared
// expert.
#pragma once

#include "model/context.h"
#include "model/model_weights.h"

namespace dsv4 {

// The MoE output [T, D] of layer `layer` for its input x [T, D] (the ffn_norm output).
DeviceTensor moe(const ForwardContext& ctx, const MoeWeights& w, int64_t layer, const DeviceTensor& x);

// The MoE layer of a rank of `group` without tokens in a step: its share of the experts for the
// rows the other ranks send, in the numerics `exact_math` names (which every rank shares).
void moe_without_tokens(Ops& ops, const ModelConfig& cfg, const MoeWeights& w, bool exact_math, ExpertComm& group);

}  // namespace dsv4
