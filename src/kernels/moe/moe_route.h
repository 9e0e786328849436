// MoE routing (MODEL.md §6): scores s = score_func(logits) per token; the chosen experts are
// tid2eid[token id] (hash layers) or the top k of s + bias (ties: lower id); their weights are s
// at the chosen experts, normalised to sum 1 in selection order (not for softmax scoring),
// times route_scale; both written in ascending expert order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

enum class RouteScoring { kSqrtSoftplus, kSigmoid, kSoftmax };

struct MoeRouteParams {
  const float* logits = nullptr;      // [T, E]
  FloatPtr bias;                      // [E], or data == nullptr for none
  const void* tid2eid = nullptr;      // [vocab, k] i32 or i64 (hash routing), or nullptr
  bool tid2eid_i64 = false;
  int64_t vocab = 0;
  const int32_t* token_ids = nullptr; // [T] (hash routing)
  RouteScoring scoring = RouteScoring::kSqrtSoftplus;
  float route_scale = 1;
  int32_t* experts = nullptr;         // [T, k] ascending; a token id outside the vocabulary or an
                                      // expert id outside [0, E) gives a row of -1 (weights 0)
  float* weights = nullptr;           // [T, k]
  int64_t tokens = 0;
  int64_t num_experts = 0;            // E
  int64_t k = 0;                      // <= kMaxRouteK
};

constexpr int64_t kMaxRouteK = 32;

void moe_route(const MoeRouteParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
