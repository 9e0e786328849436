// mHC blocks: thin compositions over the hc_pre / hc_post / hc_head ops.
#include "model/mhc.h"

namespace dsv4 {

HcMix hc_pre(const ForwardContext& ctx, const HcWeights& w, const DeviceTensor& streams, const Weight& norm) {
  const int64_t T = streams.dim(0), n = streams.dim(1), D = streams.dim(2);
  HcMix mix{ctx.alloc(ctx.act, {T, D}), ctx.alloc(DType::kF32, {T, n}), ctx.alloc(DType::kF32, {T, n, n})};
  const ModelParams& p = ctx.cfg.params();
  ctx.ops.hc_pre({streams.view(), &w.fn, &w.scale, &w.base, p.hc_sinkhorn_iters, static_cast<float>(p.hc_eps),
                  static_cast<float>(p.rms_norm_eps), mix.y.view(), mix.post.view(), mix.comb.view(), &norm});
  return mix;
}

DeviceTensor hc_post(const ForwardContext& ctx, const DeviceTensor& sublayer_out, const DeviceTensor& streams,
                     const HcMix& mix) {
  DeviceTensor out = ctx.alloc(ctx.act, streams.shape());
  ctx.ops.hc_post({sublayer_out.view(), streams.view(), mix.post.view(), mix.comb.view(), out.view()});
  return out;
}

DeviceTensor hc_head(const ForwardContext& ctx, const HcWeights& w, const DeviceTensor& streams) {
  DeviceTensor y = ctx.alloc(ctx.act, {streams.dim(0), streams.dim(2)});
  const ModelParams& p = ctx.cfg.params();
  ctx.ops.hc_head({streams.view(), &w.fn, &w.scale, &w.base, static_cast<float>(p.hc_eps),
                   static_cast<float>(p.rms_norm_eps), y.view()});
  return y;
}

}  // namespace dsv4
