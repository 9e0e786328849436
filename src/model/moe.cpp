// The MoE block: gate logits in fp32, routing, the shared expert, then the routed experts summed
// with it, all in one op (moe_experts with its gate), or across an expert group's ranks.
#include "model/moe.h"

#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/expert_parallel.h"

namespace dsv4 {

DeviceTensor moe(const ForwardContext& ctx, const MoeWeights& w, int64_t layer, const DeviceTensor& x) {
  const ModelParams& p = ctx.cfg.params();
  const int64_t T = ctx.T, k = p.num_experts_per_tok;

  // s = x.float() @ gate.float()^T, then the scores, selection and weights: the first thing the
  // experts' op does, so that a backend can overlap the shared expert with it.
  DeviceTensor experts = ctx.alloc(DType::kI32, {T, k});
  DeviceTensor weights = ctx.alloc(DType::kF32, {T, k});
  const MoeGate gate{.weight = &w.gate,
                     .act_quant = act_quant_for(ctx, w.gate),
                     .bias = w.bias ? &*w.bias : nullptr,
                     .tid2eid = w.tid2eid ? &*w.tid2eid : nullptr,
                     .token_ids = ctx.token_ids.view(),
                     .scoring = p.scoring_func,
                     .route_scale = static_cast<float>(p.routed_scaling_factor)};

  // The routed experts and the shared expert (silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit),
  // then w2, weight 1), summed in one op.
  std::vector<ExpertWeights> routed;
  for (const ExpertLinears& e : w.experts) routed.push_back({&e.w1, &e.w2, &e.w3});
  const ExpertWeights shared{&w.shared.w1, &w.shared.w2, &w.shared.w3};
  const ActQuant routed_quant = w.experts.empty() ? ActQuant::kNone : act_quant_for(ctx, w.experts.front().w1);
  DeviceTensor out = ctx.alloc(ctx.act, x.shape());
  MoeExpertsParams params{x.view(), experts.view(), weights.view(), routed, &shared, static_cast<float>(p.swiglu_limit),
                          routed_quant, act_quant_for(ctx, w.shared.w1), out.view(), &gate};
  if (ExpertComm* group = ctx.batch.options.expert_group) {
    const auto E = static_cast<int64_t>(routed.size());
    if (E % group->size() != 0)
      throw UsageError("expert parallelism: " + std::to_string(E) + " routed experts do not split over " +
                       std::to_string(group->size()) + " ranks");
    const int64_t share = E / group->size();
    params.routed = std::span<const ExpertWeights>(routed).subspan(static_cast<size_t>(group->rank() * share),
                                                                   static_cast<size_t>(share));
    moe_experts_parallel(ctx.ops, *group, params, E);
  } else {
    ctx.ops.moe_experts(params);
  }
  ctx.observe("layers." + std::to_string(layer) + ".experts", experts);
  ctx.observe("layers." + std::to_string(layer) + ".expert_weights", weights);
  return out;
}

}  // namespace dsv4
