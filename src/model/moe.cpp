// The MoE block: gate logits in fp32, routing, the shared expert, then the routed experts summed
// with it, all in one op (moe_experts with its gate), or across an expert group's ranks.
#include "model/moe.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "model/expert_parallel.h"

namespace dsv4 {

namespace {

// The routed experts' weights a forward runs: all `num_experts` of them, or (with a group) the
// rank's share, taken from all or held alone (experts that do not split over the ranks are
// refused by moe_experts_parallel). UsageError for weights holding a share other than the group's.
std::vector<ExpertWeights> routed_experts(const MoeWeights& w, const ExpertComm* group, int64_t num_experts) {
  std::vector<ExpertWeights> routed;
  for (const ExpertLinears& e : w.experts) routed.push_back({&e.w1, &e.w2, &e.w3});
  const auto held = static_cast<int64_t>(routed.size());
  if (held == num_experts) {
    if (group == nullptr) return routed;
    const int64_t share = held / group->size();
    const auto first = routed.begin() + group->rank() * share;
    return {first, first + share};
  }
  if (group == nullptr || held * group->size() != num_experts || w.first_expert != group->rank() * held)
    throw UsageError("moe: the weights hold routed experts [" + std::to_string(w.first_expert) + ", " +
                     std::to_string(w.first_expert + held) + ") of " + std::to_string(num_experts) +
                     ": their forwards need an expert group whose rank holds them, not " +
                     (group == nullptr ? std::string("none")
                                       : "rank " + std::to_string(group->rank()) + " of " + std::to_string(group->size())));
  return routed;
}

// The routed experts' activation quantisation: the forward's where their weights are FP8 or FP4.
ActQuant routed_act_quant(const MoeWeights& w, ActQuant fp8_act) {
  return w.experts.empty() ? ActQuant::kNone : act_quant_for(fp8_act, w.experts.front().w1);
}

}  // namespace

void moe_without_tokens(Ops& ops, const ModelConfig& cfg, const MoeWeights& w, bool exact_math, ExpertComm& group) {
  const ModelParams& p = cfg.params();
  const int64_t k = p.num_experts_per_tok, D = p.hidden_size;
  const DType act = forward_act_dtype(exact_math);
  const std::vector<ExpertWeights> share = routed_experts(w, &group, p.n_routed_experts);
  DeviceTensor x = ops.alloc(act, {0, D}), experts = ops.alloc(DType::kI32, {0, k}),
               weights = ops.alloc(DType::kF32, {0, k}), out = ops.alloc(act, {0, D});
  moe_experts_parallel(ops, group,
                       {x.view(), experts.view(), weights.view(), share, nullptr, static_cast<float>(p.swiglu_limit),
                        routed_act_quant(w, forward_fp8_act(exact_math)), ActQuant::kNone, out.view()},
                       p.n_routed_experts);
}

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
  ExpertComm* group = ctx.batch.options.expert_group;
  const std::vector<ExpertWeights> routed = routed_experts(w, group, p.n_routed_experts);
  const ExpertWeights shared{&w.shared.w1, &w.shared.w2, &w.shared.w3};
  DeviceTensor out = ctx.alloc(ctx.act, x.shape());
  const MoeExpertsParams params{x.view(), experts.view(), weights.view(), routed, &shared,
                                static_cast<float>(p.swiglu_limit), routed_act_quant(w, ctx.fp8_act),
                                act_quant_for(ctx, w.shared.w1), out.view(), &gate};
  if (group != nullptr)
    moe_experts_parallel(ctx.ops, *group, params, p.n_routed_experts);
  else
    ctx.ops.moe_experts(params);
  ctx.observe("layers." + std::to_string(layer) + ".experts", experts);
  ctx.observe("layers." + std::to_string(layer) + ".expert_weights", weights);
  return out;
}

}  // namespace dsv4
