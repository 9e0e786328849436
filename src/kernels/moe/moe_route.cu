// One CTA per token: the scores in parallel into shared memory; the top-k selection as k rounds
// of a warp-wide first-maximum search (the largest selection score among the unchosen experts,
// the lowest id among equals: for finite scores exactly CpuOps' serial scan); then one thread
// weights and sorts exactly as CpuOps does (sums in selection order). Only the last bit of
// expf/log1pf can differ from the CPU's scores.
#include "kernels/moe/moe_route.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kLaneExperts = 16;  // experts per lane of the selecting warp: up to 512
constexpr int kScoresPerThread = 32 * kLaneExperts / kThreads;  // of the block's scores, for up to 512 experts

// torch.nn.functional.softplus with beta 1 and threshold 20.
__device__ float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

// Whether candidate `other` beats `best` in a first-maximum search: a larger score, or an equal
// score and a lower id (-1: no candidate).
__device__ __forceinline__ bool beats(int32_t other, float other_score, int32_t best, float best_score) {
  return other >= 0 && (best < 0 || other_score > best_score || (other_score == best_score && other < best));
}

__global__ void moe_route_kernel(MoeRouteParams p) {
  pdl_wait();
  extern __shared__ float smem[];
  const int64_t E = p.num_experts, k = p.k, t = blockIdx.x;
  float* s = smem;       // [E] scores
  float* biased = s + E; // [E] selection scores
  const float* logits = p.logits + t * E;
  // A thread's logits and biases are loaded together before any score is stored (stored first,
  // each next load had to wait for the store it might alias).
  float v[kScoresPerThread], bias[kScoresPerThread];
#pragma unroll
  for (int j = 0; j < kScoresPerThread; ++j) {
    const int64_t e = threadIdx.x + j * kThreads;
    v[j] = e < E ? logits[e] : 0.0f;
    bias[j] = e < E && p.bias.data != nullptr ? load_float(p.bias, e) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kScoresPerThread; ++j) {
    const int64_t e = threadIdx.x + j * kThreads;
    if (e >= E) break;
    float sc = v[j];
    if (p.scoring == RouteScoring::kSqrtSoftplus) sc = sqrtf(softplus(v[j]));
    else if (p.scoring == RouteScoring::kSigmoid) sc = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-v[j])));
    s[e] = sc;
    biased[e] = p.bias.data != nullptr ? __fadd_rn(sc, bias[j]) : sc;
  }
  __syncthreads();
  if (p.scoring == RouteScoring::kSoftmax && threadIdx.x == 0) {
    float mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mx = fmaxf(mx, s[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) sum = __fadd_rn(sum, s[e] = expf(__fsub_rn(s[e], mx)));
    for (int64_t e = 0; e < E; ++e) s[e] = __fdiv_rn(s[e], sum);
    if (p.bias.data == nullptr)
      for (int64_t e = 0; e < E; ++e) biased[e] = s[e];
    else
      for (int64_t e = 0; e < E; ++e) biased[e] = __fadd_rn(s[e], load_float(p.bias, e));
  }
  __syncthreads();

  __shared__ int32_t chosen[kMaxRouteK];
  if (p.tid2eid == nullptr) {
    // Warp 0 alone, no block barrier per round: lane l holds the selection scores of experts
    // l + 32 j in registers; its first maximum among those not taken (j ascending), then the
    // butterfly leaves the warp's first maximum in every lane and its owner marks it taken.
    if (threadIdx.x >= 32) return;
    const int lane = static_cast<int>(threadIdx.x);
    float score[kLaneExperts];
    uint32_t taken = 0;  // bit j: expert lane + 32 j chosen, or past the experts
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) {
      const int64_t e = lane + 32 * j;
      score[j] = e < E ? biased[e] : 0.0f;
      if (e >= E) taken |= 1u << j;
    }
    for (int64_t i = 0; i < k; ++i) {
      int32_t best = -1;
      float best_score = 0.0f;
#pragma unroll
      for (int j = 0; j < kLaneExperts; ++j)
        if (!(taken >> j & 1u) && (best < 0 || score[j] > best_score)) {
          best = lane + 32 * j;
          best_score = score[j];
        }
      for (int off = 16; off > 0; off /= 2) {
        const int32_t other = __shfl_xor_sync(0xffffffffu, best, off);
        const float other_score = __shfl_xor_sync(0xffffffffu, best_score, off);
        if (beats(other, other_score, best, best_score)) {
          best = other;
          best_score = other_score;
        }
      }
      if (best >= 0 && best % 32 == lane) taken |= 1u << (best / 32);
      if (lane == 0) chosen[i] = best;
    }
  }
  if (threadIdx.x != 0) return;

  int32_t* out_e = p.experts + t * k;
  float* out_w = p.weights + t * k;
  if (p.tid2eid != nullptr) {
    const int32_t id = p.token_ids[t];
    bool ok = id >= 0 && id < p.vocab;
    for (int64_t i = 0; ok && i < k; ++i) {
      const int64_t e = p.tid2eid_i64 ? static_cast<const int64_t*>(p.tid2eid)[id * k + i]
                                      : static_cast<const int32_t*>(p.tid2eid)[id * k + i];
      ok = e >= 0 && e < E;
      chosen[i] = static_cast<int32_t>(e);
    }
    if (!ok) {
      for (int64_t i = 0; i < k; ++i) {
        out_e[i] = -1;
        out_w[i] = 0.0f;
      }
      return;
    }
  }
  float w[kMaxRouteK];
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum = __fadd_rn(sum, w[i] = s[chosen[i]]);
  for (int64_t i = 0; i < k; ++i) {
    if (p.scoring != RouteScoring::kSoftmax) w[i] = __fdiv_rn(w[i], sum);
    w[i] = __fmul_rn(w[i], p.route_scale);
  }
  // Stable insertion sort by expert id.
  for (int64_t i = 1; i < k; ++i) {
    const int32_t ce = chosen[i];
    const float cw = w[i];
    int64_t u = i;
    for (; u > 0 && chosen[u - 1] > ce; --u) {
      chosen[u] = chosen[u - 1];
      w[u] = w[u - 1];
    }
    chosen[u] = ce;
    w[u] = cw;
  }
  for (int64_t i = 0; i < k; ++i) {
    out_e[i] = chosen[i];
    out_w[i] = w[i];
  }
}

}  // namespace

void moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.tokens <= 0) return;
  if (p.num_experts > 32 * kLaneExperts)
    throw UsageError("moe_route: " + std::to_string(p.num_experts) + " experts, at most " +
                     std::to_string(32 * kLaneExperts));
  const size_t smem = static_cast<size_t>(2 * p.num_experts) * sizeof(float);
  launch_pdl(moe_route_kernel, static_cast<unsigned>(p.tokens), kThreads, smem, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
