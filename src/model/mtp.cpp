// The MTP module (MODEL.md §10.1): the next token's normalised embedding and the main model's
// normalised pre-hc_head streams, projected and summed, run through one more block (SWA-only,
// score-routed) and its own hc_head and norm, then the shared head.
#include "core/error.h"
#include "model/context.h"
#include "model/model.h"

namespace dsv4 {

ForwardResult Model::forward_mtp(Ops& ops, const ForwardBatch& batch, const DeviceTensor& streams) const {
  if (cfg_.num_mtp_layers() < 1) throw UsageError("this model has no MTP layer");
  const ForwardContext ctx(ops, cfg_, batch, /*mtp=*/true);
  const ModelParams& p = cfg_.params();
  const int64_t T = ctx.T, n = p.hc_mult, D = p.hidden_size;
  if (streams.shape() != Shape{T, n, D})
    throw UsageError("forward_mtp: the streams must be " + shape_str({T, n, D}) + ", got " + shape_str(streams.shape()));
  const MtpWeights& w = weights_.mtp.front();

  DeviceTensor e = ctx.alloc(ctx.act, {T, 1, D});
  ops.embed({ctx.token_ids.view(), &weights_.embed, e.view()});
  e = rms_norm(ctx, e.reshaped({T, D}), &w.enorm);
  DeviceTensor h = ctx.alloc(ctx.act, {T * n, D});
  ops.copy({streams.view(), h.view()});
  h = rms_norm(ctx, h, &w.hnorm);
  const DeviceTensor e_proj = linear(ctx, e, w.e_proj, ctx.act);
  const DeviceTensor h_proj = linear(ctx, h, w.h_proj, ctx.act);
  DeviceTensor x = ctx.alloc(ctx.act, {T, n, D});
  ops.add_broadcast({h_proj.reshaped({T, n, D}).view(), e_proj.view(), x.view()});

  run_layer(ctx, cfg_.num_layers(), x);
  ForwardResult out = head(ctx, w.hc_head, w.norm, x, "mtp.");
  for (size_t s = 0; s < ctx.slices.size(); ++s) ctx.cache(s).advance_mtp(ctx.slices[s].num_tokens);
  return out;
}

}  // namespace dsv4
