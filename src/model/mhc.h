// mHC, the 4-stream residual of DeepSeek-V4 (MODEL.md §2.4-2.6): hc_pre mixes the streams into
// one sub-layer input (and yields the post weights and Sinkhorn matrix), hc_post writes the
// sub-layer output back into the streams, hc_head mixes them for the final norm.
#pragma once

#include "model/context.h"
#include "model/model_weights.h"

namespace dsv4 {

struct HcMix {
  DeviceTensor y;     // [T, D] the sub-layer input, normalised
  DeviceTensor post;  // [T, n] f32
  DeviceTensor comb;  // [T, n, n] f32
};

// The sub-layer input y comes out normalised by `norm` (the sub-layer's input RMSNorm).
HcMix hc_pre(const ForwardContext& ctx, const HcWeights& w, const DeviceTensor& streams, const Weight& norm);
DeviceTensor hc_post(const ForwardContext& ctx, const DeviceTensor& sublayer_out, const DeviceTensor& streams,
                     const HcMix& mix);
DeviceTensor hc_head(const ForwardContext& ctx, const HcWeights& w, const DeviceTensor& streams);

}  // namespace dsv4
