// The MoE block: gate logits in fp32, routing, the shared expert, then the routed experts summed
// with it.
#include "model/moe.h"

#include <string>
#include <vector>

namespace dsv4 {

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

  // The routed experts and the shared expert (silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit),
  // then w2, weight 1), summed in one op.
  std::vector<ExpertWeights> routed;
  for (const ExpertLinears& e : w.experts) routed.push_back({&e.w1, &e.w2, &e.w3});
  const ExpertWeights shared{&w.shared.w1, &w.shared.w2, &w.shared.w3};
  const ActQuant routed_quant = w.experts.empty() ? ActQuant::kNone : act_quant_for(ctx, w.experts.front().w1);
  DeviceTensor out = ctx.alloc(ctx.act, x.shape());
  ctx.ops.moe_experts({x.view(), experts.view(), weights.view(), routed, &shared, static_cast<float>(p.swiglu_limit),
                       routed_quant, act_quant_for(ctx, w.shared.w1), out.view()});
  return out;
}

}  // namespace dsv4
