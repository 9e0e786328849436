// gate_route_plan's kernel (see gate_route_plan.h): one launch of (E / 16) x (K / 1024) blocks of
// 8 warps, whose last blocks finish the gate's rows and then the routing and the plan.
#include "kernels/moe/gate_route_plan.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/last_block.cuh"
#include "kernels/launch.cuh"
#include "kernels/moe/plan_in_block.cuh"
#include "kernels/moe/route_token.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 8;  // K blocks of a block, one a warp
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;              // gate rows of a block (one MMA's M)
constexpr int64_t kKBlock = 128;
constexpr int kTileFloats = 4 * 32;    // one warp's blk: its lanes' four accumulators
constexpr int kSumsAhead = 16;         // a finishing thread's sums loaded before it adds any
static_assert(kThreads >= kGateRoutePlanMaxExperts, "the plan's threads own an expert each");
static_assert(kWarps >= kGateRoutePlanMaxTokens, "a warp routes each token");
static_assert(kSumsAhead % 4 == 0, "a batch of sums starts at lane 0");

int64_t row_blocks(int64_t num_experts) { return (num_experts + kRows - 1) / kRows; }

// Block (row block i, K group j): warp w takes K block b = 8 j + w of gate rows 16 i .. 16 i + 15
// (as bf16_mma_gemm's streamed kernel takes a block: the same MMAs on the same fragments) and
// stores its blk. The last of row block i's blocks adds them in bf16_mma_gemm.h's order (thread
// c * 32 + lane: accumulator c of lane (g, t), x row 2t + (c & 1), gate row g + 8 (c >= 2)). The
// last row block to finish routes token w on warp w and makes the plan.
__global__ void __launch_bounds__(kThreads) gate_route_plan_kernel(GateRoutePlanParams p) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  const int64_t E = p.route.num_experts, kblocks = p.d / kKBlock, n0 = int64_t{blockIdx.x} * kRows;
  const int tokens = static_cast<int>(p.route.tokens);
  const int64_t b = int64_t{blockIdx.y} * kWarps + warp;
  const bool block_in = b < kblocks;
  // The weight is no kernel's output: it loads before the wait (programmatic dependent launch), x after.
  const uint16_t* wa = p.w + (n0 + g) * p.d + b * kKBlock + 32 * t;
  const Bf16x32 w_lo = load_bf16x32(wa, block_in && n0 + g < E);
  const Bf16x32 w_hi = load_bf16x32(wa + 8 * p.d, block_in && n0 + g + 8 < E);
  pdl_wait();
  const Bf16x32 x = load_bf16x32(p.x + g * p.ldx + b * kKBlock + 32 * t, block_in && g < tokens);
  if (block_in) {
    float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < 8; ++s)
      mma_bf16_f32(blk, w_lo.word(2 * s), w_hi.word(2 * s), w_lo.word(2 * s + 1), w_hi.word(2 * s + 1), x.word(2 * s),
                   x.word(2 * s + 1));
    float* tile = p.partials + (int64_t{blockIdx.x} * kblocks + b) * kTileFloats;
#pragma unroll
    for (int c = 0; c < 4; ++c) tile[c * 32 + lane] = blk[c];
  }
  if (!last_block_to_arrive(p.done + blockIdx.x, gridDim.y)) return;

  if (threadIdx.x < kTileFloats) {
    const float* sums = p.partials + int64_t{blockIdx.x} * kblocks * kTileFloats + threadIdx.x;
    float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // lane q_j: the blocks b = j mod 4, ascending
    for (int64_t b0 = 0; b0 < kblocks; b0 += kSumsAhead) {
      float v[kSumsAhead];
#pragma unroll
      for (int i = 0; i < kSumsAhead; ++i) v[i] = b0 + i < kblocks ? __ldcg(sums + (b0 + i) * kTileFloats) : 0.0f;
#pragma unroll
      for (int i = 0; i < kSumsAhead; ++i)
        if (b0 + i < kblocks) q[i % 4] = __fadd_rn(q[i % 4], v[i]);
    }
    const float sum = __fadd_rn(__fadd_rn(__fadd_rn(q[0], q[1]), q[2]), q[3]);
    const int c = static_cast<int>(threadIdx.x / 32);
    const int r = 2 * t + (c & 1);
    const int64_t n = n0 + g + (c >= 2 ? 8 : 0);
    if (r < tokens && n < E) p.logits[r * E + n] = sum;
  }
  if (threadIdx.x == 0) p.done[blockIdx.x] = 0;  // for the next call
  if (!last_block_to_arrive(p.done + gridDim.x, gridDim.x)) return;

  extern __shared__ float scores[];  // [tokens][E] scores, then as many selection scores
  float* s = scores;
  float* biased = scores + tokens * E;
  MoeRouteParams route = p.route;
  route.logits = p.logits;
  route_scores(route, 0, tokens, s, biased);
  if (warp < tokens) route_token_on_warp(route, warp, s + warp * E, biased + warp * E);
  __syncthreads();
  plan_in_block<kThreads>(p.plan);
  if (threadIdx.x == 0) p.done[gridDim.x] = 0;
}

std::string describe(const GateRoutePlanParams& p) {
  return std::to_string(p.route.tokens) + " tokens, " + std::to_string(p.route.num_experts) + " experts, k=" +
         std::to_string(p.route.k) + ", d=" + std::to_string(p.d) + ", ldx=" + std::to_string(p.ldx) + ", plan of " +
         std::to_string(p.plan.pairs) + " pairs over " + std::to_string(p.plan.num_experts) + " experts";
}

}  // namespace

int64_t gate_route_plan_partial_floats(int64_t num_experts, int64_t d) {
  return row_blocks(num_experts) * (d / kKBlock) * kTileFloats;
}

int64_t gate_route_plan_counters(int64_t num_experts) { return row_blocks(num_experts) + 1; }

bool gate_route_plan_supports(const GateRoutePlanParams& p) {
  const MoeRouteParams& r = p.route;
  const ExpertPlanParams& plan = p.plan;
  return r.tokens >= 1 && r.tokens <= kGateRoutePlanMaxTokens && r.k >= 1 && r.k <= kMaxRouteK &&
         r.num_experts >= r.k && r.num_experts <= kGateRoutePlanMaxExperts && p.d > 0 && p.d % kKBlock == 0 &&
         p.ldx >= p.d && p.ldx % 8 == 0 && aligned16(p.x) && aligned16(p.w) && p.logits != nullptr &&
         p.partials != nullptr && p.done != nullptr && plan.pairs == r.tokens * r.k && plan.k == r.k &&
         plan.num_experts == r.num_experts && plan.experts == r.experts && plan.weights == r.weights;
}

void gate_route_plan(const GateRoutePlanParams& p, cudaStream_t stream) {
  if (!gate_route_plan_supports(p))
    throw UsageError("gate_route_plan: " + describe(p) + ": takes 1.." + std::to_string(kGateRoutePlanMaxTokens) +
                     " tokens, k experts of up to " + std::to_string(kGateRoutePlanMaxExperts) + " (k <= " +
                     std::to_string(kMaxRouteK) +
                     "), d a multiple of 128, ldx >= d a multiple of 8, 16-byte aligned x and weight, scratch, and "
                     "the routing's pairs as the plan's");
  const auto groups = static_cast<unsigned>((p.d / kKBlock + kWarps - 1) / kWarps);
  const size_t smem = static_cast<size_t>(2 * p.route.tokens * p.route.num_experts) * sizeof(float);
  launch_pdl(gate_route_plan_kernel, dim3(static_cast<unsigned>(row_blocks(p.route.num_experts)), groups), kThreads,
             smem, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
