// The routed experts' row plan of a small batch made by one block (expert_plan's decode form,
// which kernels::gate_route_plan runs after its routing): thread e owns expert e (count, offset,
// tiles); pair r's rank within its expert is the number of earlier pairs with its id, so rows
// keep pair order as the span-parallel plan's do.
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "kernels/moe/expert_plan.h"

namespace dsv4::kernels {

// The most pairs the one-block plan takes.
inline constexpr int64_t kPlanInBlockMaxPairs = 1024;

__device__ __forceinline__ bool valid_expert(int32_t e, int32_t num_experts) { return e >= 0 && e < num_experts; }

// Rows [placed, pairs) belong to no expert (pairs whose id is out of range, reported through
// p.fault): they gather token 0 with weight 0 instead of whatever the buffers held, so the gather
// reads inside x until the fault surfaces at the next synchronisation.
__device__ __forceinline__ void fill_unplaced_rows(const ExpertPlanParams& p, int64_t placed, int64_t first,
                                                   int64_t stride) {
  for (int64_t i = placed + first; i < p.pairs; i += stride) {
    p.src_token[i] = 0;
    p.row_weight[i] = 0.0f;
  }
}

// The whole plan by a block of kThreads (every thread calls it), for num_experts <= kThreads and
// pairs <= kPlanInBlockMaxPairs. p.experts and p.weights are read after the block's first barrier.
template <int kThreads>
__device__ __forceinline__ void plan_in_block(const ExpertPlanParams& p) {
  using Scan = cub::BlockScan<int32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t ids[kPlanInBlockMaxPairs];
  __shared__ int32_t count[kThreads], offset[kThreads];
  const int e = static_cast<int>(threadIdx.x);
  count[e] = 0;
  for (int64_t r = e; r < p.pairs; r += kThreads) ids[r] = p.experts[r];
  __syncthreads();
  for (int64_t r = e; r < p.pairs; r += kThreads) {
    const int32_t id = ids[r];
    if (valid_expert(id, p.num_experts)) atomicAdd(&count[id], 1);
    else if (atomicCAS(p.fault, 0, kFaultExpertId) == 0) p.fault[1] = id;
  }
  __syncthreads();
  const int32_t c = e < p.num_experts ? count[e] : 0;
  int32_t begin = 0, placed = 0, first_tile = 0, tiles = 0;
  Scan(scan).ExclusiveSum(c, begin, placed);
  __syncthreads();
  Scan(scan).ExclusiveSum((c + p.tile_rows - 1) / p.tile_rows, first_tile, tiles);
  offset[e] = begin;
  if (e < p.num_experts) {
    p.count[e] = c;
    p.offset[e] = begin;
    for (int32_t j = 0; j * p.tile_rows < c; ++j)
      p.tiles[first_tile + j] = {e, begin + j * p.tile_rows, min(p.tile_rows, c - j * p.tile_rows)};
  }
  if (e == 0) *p.tile_count = tiles;
  fill_unplaced_rows(p, placed, e, kThreads);
  __syncthreads();
  for (int64_t r = e; r < p.pairs; r += kThreads) {
    const int32_t id = ids[r];
    if (!valid_expert(id, p.num_experts)) {
      p.row_of[r] = -1;
      continue;
    }
    int32_t rank = 0;
    for (int64_t q = 0; q < r; ++q) rank += ids[q] == id;
    const int32_t i = offset[id] + rank;
    p.src_token[i] = static_cast<int32_t>(r / p.k);
    p.row_weight[i] = p.weights[r];
    p.row_of[r] = i;
  }
}

}  // namespace dsv4::kernels
