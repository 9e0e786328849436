// The routed experts' row plan, made on the device so the MoE needs no host round trip: the
// (token, slot) pairs grouped by expert (ascending; within an expert in token order, the order
// the host-side grouping used), each expert's rows cut into tiles for kernels::fp8_mma_gemm's
// grouped mode.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fault.h"

#include "kernels/gemm/fp8_mma_gemm.h"

namespace dsv4::kernels {

struct ExpertPlanParams {
  const int32_t* experts = nullptr;  // [pairs] expert of (token, slot), pairs = tokens * k
  const float* weights = nullptr;    // [pairs] routing weight of (token, slot)
  int64_t pairs = 0;
  int32_t k = 0;                     // slots per token
  int32_t num_experts = 0;
  int32_t tile_rows = 0;             // rows per tile (fp8_mma_tile_rows: 8, 16, 32 or 128)
  // Scratch: [num_experts] each, and [expert_plan_spans(pairs) * num_experts].
  int32_t* count = nullptr;
  int32_t* offset = nullptr;
  int32_t* span_count = nullptr;
  // The plan. Grouped row i holds (token src_token[i]) with weight row_weight[i]; (token, slot)
  // pair r went to grouped row row_of[r], or -1 if its expert id is outside [0, num_experts)
  // (the rows after the placed ones then hold token 0 with weight 0).
  int32_t* src_token = nullptr;      // [pairs]
  float* row_weight = nullptr;       // [pairs]
  int32_t* row_of = nullptr;         // [pairs]
  Fp8MmaTile* tiles = nullptr;       // [max_tiles]
  int32_t* tile_count = nullptr;     // [1]
  int64_t max_tiles = 0;             // >= expert_plan_max_tiles(pairs, num_experts, tile_rows)
  // An expert id outside [0, num_experts) sets fault[0] = kFaultExpertId (if still 0) and
  // fault[1] = the id.
  int32_t* fault = nullptr;
};

// The pairs a warp of the plan's kernels walks (spans are planned in parallel; the plan does not
// depend on it).
inline constexpr int64_t kPairsPerSpan = 2048;

// The spans of a plan of `pairs` rows: the rows of its span_count scratch.
int64_t expert_plan_spans(int64_t pairs);

// The most tiles a plan of `pairs` rows over `num_experts` experts can need.
int64_t expert_plan_max_tiles(int64_t pairs, int32_t num_experts, int32_t tile_rows);

void expert_plan(const ExpertPlanParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
