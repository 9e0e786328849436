// The MoE block: gate logits in fp32, routing, the shared expert, then the routed experts summed
// with it.
#include "model/moe.h"

#include <string>
#include <vector>

namespace dsv4 {

namespace {

// silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit), then w2; the shared expert (weight 1).
DeviceTensor shared_expert(const ForwardContext& ctx, const ExpertLinears& e, const DeviceTensor& x) {
  const auto [gate, up] = linear_pair(ctx, x, e.w1, e.w3, ctx.act);
  DeviceTensor h = ctx.alloc(ctx.act, gate.shape());
  ctx.ops.swiglu({gate.view(), up.view(), {}, static_cast<float>(ctx.cfg->swiglu_limit), h.view()});
  return linear(ctx, h, e.w2, ctx.act);
}

}  // namespace

DeviceTensor moe(const ForwardContext& ctx, const MoeWeights& w, int64_t layer, const DeviceTensor& x) {
  const ModelParams& p = ctx.cfg.params();
  const int64_t T = ctx.T, k = p.num_experts_per_tok;

  // s = x.float() @ gate.float()^T; the op scores, selects and weights.
  const DeviceTensor logits = linear(ctx, x, w.gate, DType::kF32);
  DeviceTensor experts = ctx.alloc(DType::kI32, {T, k});
  DeviceTensor weights = ctx.alloc(DType::kF32, {T, k});
  ctx.ops.moe_route({logits.view(), w.bias ? &*w.bias : nullptr, w.tid2eid ? &*w.tid2eid : nullptr, ctx.token_ids.view(),
                     p.scoring_func, static_cast<float>(p.routed_scaling_factor), experts.view(), weights.view()});
  ctx.observe("layers." + std::to_string(layer) + ".experts", experts);
  ctx.observe("layers." + std::to_string(layer) + ".expert_weights", weights);

  const DeviceTensor shared = shared_expert(ctx, w.shared, x);
  std::vector<ExpertWeights> routed;
  for (const ExpertLinears& e : w.experts) routed.push_back({&e.w1, &e.w2, &e.w3});
  const bool quantised = !w.experts.empty() && w.experts.front().w1.format != WeightFormat::kPlain;
  DeviceTensor out = ctx.alloc(ctx.act, x.shape());
  ctx.ops.moe_experts({x.view(), experts.view(), weights.view(), routed, shared.view(),
                       static_cast<float>(p.swiglu_limit), quantised ? ctx.fp8_act : ActQuant::kNone, out.view()});
  return out;
}

}  // namespace dsv4
