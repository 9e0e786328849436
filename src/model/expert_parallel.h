// The routed experts across the ranks of an expert group (docs/ARCHITECTURE.md "Several
// devices"): each rank routes its own tokens, sends each (token, slot) row to the rank holding
// its expert, runs the rows it receives through its share of the experts, sends the results back
// and sums its tokens' slots in order with the shared expert: moe_experts' bits on every rank,
// whatever the number of ranks (a slot's term is rounded to the activation dtype before it
// travels, and the sum is the owner's, in slot order).
#pragma once

#include <cstdint>

#include "ops/expert_comm.h"
#include "ops/ops.h"

namespace dsv4 {

// moe_experts(p) for this rank's tokens, with p.routed this rank's share of `num_experts` experts
// (the comm's rank r holds experts [r n, (r + 1) n), n = num_experts / size) and p.gate (if any)
// routing over all of them. Every rank of the group calls it for the same layer together; a rank
// with no tokens (x of 0 rows) only serves the others' rows. UsageError for a share of the wrong
// size or experts that do not divide.
void moe_experts_parallel(Ops& ops, ExpertComm& comm, const MoeExpertsParams& p, int64_t num_experts);

}  // namespace dsv4
