// One CTA per token: the scores in parallel into shared memory; the top-k selection as k rounds
// of a warp-wide first-maximum search (the largest selection score among the unchosen experts,
// the lowest id among equals: for finite scores exactly CpuOps' serial scan); then the same warp
// weights and sorts as CpuOps does, lane i holding choice i (the weights' sum in selection order,
// each choice's place in the stable sort by id counted from the others'). Only the last bit of
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

  // Warp 0 alone from here: lane i < k ends with choice i (its expert id) and its score.
  if (threadIdx.x >= 32) return;
  const int lane = static_cast<int>(threadIdx.x);
  const bool mine = lane < k;
  int32_t id = -1;
  if (p.tid2eid == nullptr) {
    // Lane l holds the selection scores of experts l + 32 j in registers; each round its first
    // maximum among those not taken (j ascending), then the butterfly leaves the warp's first
    // maximum in every lane and its owner marks it taken.
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
      if (lane == i) id = best;
    }
  } else {
    const int32_t token_id = p.token_ids[t];
    const bool known = token_id >= 0 && token_id < p.vocab;
    int64_t e = -1;  // checked as stored: an i64 id must not wrap into range
    if (mine && known)
      e = p.tid2eid_i64 ? static_cast<const int64_t*>(p.tid2eid)[token_id * k + lane]
                        : static_cast<const int32_t*>(p.tid2eid)[token_id * k + lane];
    id = static_cast<int32_t>(e);
    const bool ok = __all_sync(0xffffffffu, !mine || (known && e >= 0 && e < E));
    if (!ok) {
      if (mine) {
        p.experts[t * k + lane] = -1;
        p.weights[t * k + lane] = 0.0f;
      }
      return;
    }
  }
  // The weights as CpuOps computes them: their sum in selection order, each divided by it
  // (not for softmax scores), then scaled.
  float w = mine && id >= 0 ? s[id] : 0.0f;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum = __fadd_rn(sum, __shfl_sync(0xffffffffu, w, static_cast<int>(i)));
  if (p.scoring != RouteScoring::kSoftmax) w = __fdiv_rn(w, sum);
  w = __fmul_rn(w, p.route_scale);
  // Choice i's place in the stable sort by expert id: the choices of lower ids, and the earlier
  // ones of its id.
  int place = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int32_t other = __shfl_sync(0xffffffffu, id, static_cast<int>(i));
    place += other < id || (other == id && i < lane) ? 1 : 0;
  }
  if (mine) {
    p.experts[t * k + place] = id;
    p.weights[t * k + place] = w;
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
