// The pieces of moe_route's kernel that kernels::gate_route_plan runs too: a block's scores of a
// few tokens into shared memory, then one warp per token choosing its experts (the largest
// selection score among the unchosen experts, the lowest id among equals: for finite scores
// exactly CpuOps' serial scan) and weighting and sorting them as CpuOps does, lane i holding
// choice i. Only the last bit of expf/log1pf can differ from the CPU's scores.
#pragma once

#include <cstdint>

#include "kernels/moe/moe_route.h"

namespace dsv4::kernels {

constexpr int kRouteLaneExperts = 16;  // experts per lane of a selecting warp: up to 512
constexpr int kRouteScoresAhead = 4;   // scores a thread loads before it computes any

// torch.nn.functional.softplus with beta 1 and threshold 20.
__device__ __forceinline__ float route_softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

// Whether candidate `other` beats `best` in a first-maximum search: a larger score, or an equal
// score and a lower id (-1: no candidate).
__device__ __forceinline__ bool route_beats(int32_t other, float other_score, int32_t best, float best_score) {
  return other >= 0 && (best < 0 || other_score > best_score || (other_score == best_score && other < best));
}

// Tokens [t0, t0 + tokens)'s scores s and selection scores biased ([tokens][E] each, shared
// memory) by every thread of the block; ends with the block's barrier. The logits are read from
// L2 (__ldcg): gate_route_plan's other blocks wrote them. A thread loads kRouteScoresAhead
// logits and biases before it stores any score (stored first, each next load had to wait for the
// store it might alias).
__device__ __forceinline__ void route_scores(const MoeRouteParams& p, int64_t t0, int tokens, float* s, float* biased) {
  const int E = static_cast<int>(p.num_experts), total = tokens * E, threads = static_cast<int>(blockDim.x);
  const float* logits = p.logits + t0 * E;
  for (int base = static_cast<int>(threadIdx.x); base < total; base += kRouteScoresAhead * threads) {
    float v[kRouteScoresAhead], bias[kRouteScoresAhead];
#pragma unroll
    for (int j = 0; j < kRouteScoresAhead; ++j) {
      const int i = base + j * threads;
      v[j] = i < total ? __ldcg(logits + i) : 0.0f;
      bias[j] = i < total && p.bias.data != nullptr ? load_float(p.bias, i % E) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kRouteScoresAhead; ++j) {
      const int i = base + j * threads;
      if (i >= total) break;
      float sc = v[j];
      if (p.scoring == RouteScoring::kSqrtSoftplus) sc = sqrtf(route_softplus(v[j]));
      else if (p.scoring == RouteScoring::kSigmoid) sc = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-v[j])));
      s[i] = sc;
      biased[i] = p.bias.data != nullptr ? __fadd_rn(sc, bias[j]) : sc;
    }
  }
  __syncthreads();
}

// Token t's choice on the calling warp (every lane calls it), from its scores s and selection
// scores biased ([E], route_scores'): softmax scores first normalised by lane 0 in CpuOps'
// order, then lane i < k ends with choice i; the experts (ascending) and weights stored.
__device__ __forceinline__ void route_token_on_warp(const MoeRouteParams& p, int64_t t, float* s, float* biased) {
  const int64_t E = p.num_experts, k = p.k;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (p.scoring == RouteScoring::kSoftmax) {
    if (lane == 0) {
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
    __syncwarp();
  }
  const bool mine = lane < k;
  int32_t id = -1;
  if (p.tid2eid == nullptr) {
    // Lane l holds the selection scores of experts l + 32 j in registers; each round its first
    // maximum among those not taken (j ascending), then the butterfly leaves the warp's first
    // maximum in every lane and its owner marks it taken.
    float score[kRouteLaneExperts];
    uint32_t taken = 0;  // bit j: expert lane + 32 j chosen, or past the experts
#pragma unroll
    for (int j = 0; j < kRouteLaneExperts; ++j) {
      const int64_t e = lane + 32 * j;
      score[j] = e < E ? biased[e] : 0.0f;
      if (e >= E) taken |= 1u << j;
    }
    for (int64_t i = 0; i < k; ++i) {
      int32_t best = -1;
      float best_score = 0.0f;
#pragma unroll
      for (int j = 0; j < kRouteLaneExperts; ++j)
        if (!(taken >> j & 1u) && (best < 0 || score[j] > best_score)) {
          best = lane + 32 * j;
          best_score = score[j];
        }
      for (int off = 16; off > 0; off /= 2) {
        const int32_t other = __shfl_xor_sync(0xffffffffu, best, off);
        const float other_score = __shfl_xor_sync(0xffffffffu, best_score, off);
        if (route_beats(other, other_score, best, best_score)) {
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

}  // namespace dsv4::kernels
