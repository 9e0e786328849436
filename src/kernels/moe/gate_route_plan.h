// The MoE routing of a decode batch in one launch: the gate's logits (kernels::bf16_mma_gemm's
// bits), kernels::moe_route's experts and weights and kernels::expert_plan's plan, which take three
// launches (four kernels' latencies on a batch-1 step's chain: the gate over 16 blocks, the route,
// the plan) otherwise.
//
// How: blocks (16 gate rows, 8 K blocks) each leave one blk_b (bf16_mma_gemm.h's per-block sums)
// per warp in a scratch; the last block of a row block to finish adds them into the lanes q_j in
// ascending b and the lanes in order (bf16_mma_gemm.h's order: its bits), writing 16 rows of
// logits; the last row block to finish routes every token (route_token.cuh, moe_route's code)
// and makes the plan (plan_in_block.cuh, expert_plan's one-block code). The gate weight streams
// over a grid of (E / 16) x (K / 1024) blocks instead of E / 16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/expert_plan.h"
#include "kernels/moe/moe_route.h"

namespace dsv4::kernels {

// The most tokens and experts a call takes (the one-block plan's threads own an expert each).
inline constexpr int64_t kGateRoutePlanMaxTokens = 8;
inline constexpr int64_t kGateRoutePlanMaxExperts = 256;

struct GateRoutePlanParams {
  const uint16_t* x = nullptr;  // [route.tokens, d] bf16, row stride ldx (a multiple of 8, 16-byte aligned)
  int64_t ldx = 0;
  const uint16_t* w = nullptr;  // the gate's weight [route.num_experts, d] bf16 (16-byte aligned)
  int64_t d = 0;                // a multiple of 128
  float* logits = nullptr;      // [route.tokens, E] fp32: the gate's output (route.logits is not read)
  // route.experts and route.weights as moe_route writes them; plan as expert_plan writes it
  // (plan.experts and plan.weights are route's, pairs = tokens * k).
  MoeRouteParams route;
  ExpertPlanParams plan;
  float* partials = nullptr;    // scratch: gate_route_plan_partial_floats(E, d)
  unsigned* done = nullptr;     // gate_route_plan_counters(E) zeros; zero again when the call ends
};

int64_t gate_route_plan_partial_floats(int64_t num_experts, int64_t d);
int64_t gate_route_plan_counters(int64_t num_experts);

// Whether a call takes p: 1..kGateRoutePlanMaxTokens tokens, up to kGateRoutePlanMaxExperts
// experts (at least k), k <= kMaxRouteK, d a multiple of 128, the alignments above, the plan's
// pairs and experts the routing's.
bool gate_route_plan_supports(const GateRoutePlanParams& p);

// Throws UsageError for a call gate_route_plan_supports refuses.
void gate_route_plan(const GateRoutePlanParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
