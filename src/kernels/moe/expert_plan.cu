// The routed experts' row plan (see expert_plan.h): the pairs are cut into spans of
// kPairsPerSpan; one warp per (expert, span) counts the expert's pairs in the span, one small
// block turns the counts into offsets (each span's start within its expert's rows) and tiles, and
// one warp per (expert, span) writes its rows in pair order (a ballot per 32 pairs gives each
// match its rank), so the plan is deterministic and does not depend on the span length. Each warp
// reads its span's ids, kChunksAhead chunks of 32 at a time. With one warp per expert walking all
// pairs, an 8k prefill's plan (49,152 pairs) took 0.36 ms a layer on 32 SMs (docs/PERF.md,
// session 40).
// Small batches (decode) make the same plan in one block instead: a kernel's latency, not three.
#include "kernels/moe/expert_plan.h"

#include <algorithm>

#include <cub/block/block_scan.cuh>

#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/moe/plan_in_block.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kPlanTilesThreads = 256;

// A warp walks its span in steps of kChunksAhead chunks of 32, loading a step's ids before it
// uses any of them, so that it waits for one load's latency per step rather than per chunk.
constexpr int kChunksAhead = 8;
static_assert(kPairsPerSpan % (32 * kChunksAhead) == 0, "a span is whole steps");

// The ids of pairs base + 32 c + lane (0 from `end` on; callers test r < end).
__device__ __forceinline__ void load_ids(const ExpertPlanParams& p, int64_t base, int64_t end, int lane,
                                         int32_t (&ids)[kChunksAhead]) {
#pragma unroll
  for (int c = 0; c < kChunksAhead; ++c) {
    const int64_t r = base + 32 * c + lane;
    ids[c] = r < end ? p.experts[r] : 0;
  }
}

// Walks span `span` as expert e's warp: visit(r, in, id, ballot) for each lane's pair r (in: r is
// a pair of the span; id: its expert id, 0 past the end), with the warp's ballot of the pairs that
// are e's.
template <typename Visit>
__device__ __forceinline__ void for_each_pair(const ExpertPlanParams& p, int64_t span, int32_t e, int lane, Visit&& visit) {
  const int64_t begin = span * kPairsPerSpan, end = min(p.pairs, begin + kPairsPerSpan);
  for (int64_t base = begin; base < end; base += 32 * kChunksAhead) {
    int32_t ids[kChunksAhead];
    load_ids(p, base, end, lane, ids);
#pragma unroll
    for (int c = 0; c < kChunksAhead; ++c) {
      const int64_t r = base + 32 * c + lane;
      const bool in = r < end;
      visit(r, in, ids[c], __ballot_sync(0xffffffffu, in && ids[c] == e));
    }
  }
}

// Grid (experts / kWarpsPerBlock, spans): span_count[span][e] = expert e's pairs in the span.
__global__ void count_pairs_kernel(ExpertPlanParams p) {
  pdl_wait();
  const int32_t e = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t span = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (e >= p.num_experts) return;
  int32_t n = 0;
  for_each_pair(p, span, e, lane, [&](int64_t, bool in, int32_t id, uint32_t ballot) {
    n += __popc(ballot);
    // Expert 0's warps also look for ids no expert owns.
    if (e == 0 && in && !valid_expert(id, p.num_experts) && atomicCAS(p.fault, 0, kFaultExpertId) == 0) p.fault[1] = id;
  });
  if (lane == 0) p.span_count[span * p.num_experts + e] = n;
}

// One block: thread i takes experts [i per, (i + 1) per) (per = num_experts / kPlanTilesThreads
// rounded up), sums each one's span counts in span order (each span count becomes the span's
// start within its expert's rows), then block scans of the threads' rows and tiles give each
// expert its offset and first tile, and the thread writes its experts' tiles. (A serial scan by
// one thread took 17 us a call.)
__global__ void __launch_bounds__(kPlanTilesThreads) plan_tiles_kernel(ExpertPlanParams p, int64_t spans) {
  pdl_wait();
  using Scan = cub::BlockScan<int32_t, kPlanTilesThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int32_t per = (p.num_experts + kPlanTilesThreads - 1) / kPlanTilesThreads;
  const int32_t e_begin = min(p.num_experts, static_cast<int32_t>(threadIdx.x) * per);
  const int32_t e_end = min(p.num_experts, e_begin + per);
  int32_t rows = 0, tiles = 0;
  for (int32_t e = e_begin; e < e_end; ++e) {
    int32_t expert_rows = 0;
    for (int64_t s = 0; s < spans; ++s) {
      int32_t& n = p.span_count[s * p.num_experts + e];
      const int32_t span_rows = n;
      n = expert_rows;
      expert_rows += span_rows;
    }
    p.count[e] = expert_rows;
    rows += expert_rows;
    tiles += (expert_rows + p.tile_rows - 1) / p.tile_rows;
  }
  int32_t row = 0, tile = 0, placed = 0, tile_count = 0;
  Scan(scan).ExclusiveSum(rows, row, placed);
  __syncthreads();
  Scan(scan).ExclusiveSum(tiles, tile, tile_count);
  if (threadIdx.x == 0) *p.tile_count = tile_count;
  for (int32_t e = e_begin; e < e_end; ++e) {
    const int32_t c = p.count[e];
    p.offset[e] = row;
    for (int32_t j = 0; j * p.tile_rows < c; ++j)
      p.tiles[tile++] = {e, row + j * p.tile_rows, min(p.tile_rows, c - j * p.tile_rows)};
    row += c;
  }
  fill_unplaced_rows(p, placed, threadIdx.x, blockDim.x);
}

// Grid as count_pairs_kernel's: the warp of (e, span) writes e's rows of the span.
__global__ void place_pairs_kernel(ExpertPlanParams p) {
  pdl_wait();
  const int32_t e = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t span = blockIdx.y;
  const int lane = threadIdx.x % 32;
  if (e >= p.num_experts) return;
  int32_t next = p.offset[e] + p.span_count[span * p.num_experts + e];
  for_each_pair(p, span, e, lane, [&](int64_t r, bool in, int32_t id, uint32_t ballot) {
    if (in && id == e) {
      const int32_t i = next + __popc(ballot & ((1u << lane) - 1));
      p.src_token[i] = static_cast<int32_t>(r / p.k);
      p.row_weight[i] = p.weights[r];
      p.row_of[r] = i;
    }
    if (e == 0 && in && !valid_expert(id, p.num_experts)) p.row_of[r] = -1;
    next += __popc(ballot);
  });
}

}  // namespace

int64_t expert_plan_spans(int64_t pairs) { return std::max<int64_t>(1, (pairs + kPairsPerSpan - 1) / kPairsPerSpan); }

int64_t expert_plan_max_tiles(int64_t pairs, int32_t num_experts, int32_t tile_rows) {
  return (pairs + tile_rows - 1) / tile_rows + std::min<int64_t>(num_experts, pairs);
}

constexpr int kSmallThreads = 1024;

// The whole plan in one block (plan_in_block), for num_experts <= kSmallThreads and pairs <=
// kPlanInBlockMaxPairs.
__global__ void __launch_bounds__(kSmallThreads) plan_small_kernel(ExpertPlanParams p) {
  pdl_wait();
  plan_in_block<kSmallThreads>(p);
}

void expert_plan(const ExpertPlanParams& p, cudaStream_t stream) {
  if (p.num_experts <= 0) return;
  if (p.num_experts <= kSmallThreads && p.pairs <= kPlanInBlockMaxPairs) {
    launch_pdl(plan_small_kernel, 1, kSmallThreads, 0, stream, p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int64_t spans = expert_plan_spans(p.pairs);
  const dim3 grid(static_cast<unsigned>((p.num_experts + kWarpsPerBlock - 1) / kWarpsPerBlock), static_cast<unsigned>(spans));
  launch_pdl(count_pairs_kernel, grid, kWarpsPerBlock * 32, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
  launch_pdl(plan_tiles_kernel, 1, kPlanTilesThreads, 0, stream, p, spans);
  DSV4_CUDA_CHECK(cudaGetLastError());
  launch_pdl(place_pairs_kernel, grid, kWarpsPerBlock * 32, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
