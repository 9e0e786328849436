// One CTA per token: the scores in parallel into shared memory; the top-k selection as k rounds
// of a warp-wide first-maximum search, then the same warp weights and sorts as CpuOps does
// (route_token.cuh, which kernels::gate_route_plan shares).
#include "kernels/moe/moe_route.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/moe/route_token.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 128;

// One token a block: its scores by the block, its choice by warp 0.
__global__ void moe_route_kernel(MoeRouteParams p) {
  pdl_wait();
  extern __shared__ float smem[];
  float* s = smem;                    // [E] scores
  float* biased = s + p.num_experts;  // [E] selection scores
  route_scores(p, blockIdx.x, 1, s, biased);
  if (threadIdx.x < 32) route_token_on_warp(p, blockIdx.x, s, biased);
}

}  // namespace

void moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return;
  if (p.num_experts > 32 * kRouteLaneExperts)
    throw UsageError("moe_route: " + std::to_string(p.num_experts) + " experts, at most " +
                     std::to_string(32 * kRouteLaneExperts));
  const size_t smem = static_cast<size_t>(2 * p.num_experts) * sizeof(float);
  launch_pdl(moe_route_kernel, static_cast<unsigned>(p.tokens), kThreads, smem, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
