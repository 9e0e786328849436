// The routed experts' row plan (see expert_plan.h): one warp per expert counts its pairs, one
// small block turns the counts into offsets and tiles, and one warp per expert writes its rows in
// pair order (a ballot per 32 pairs gives each match its rank), so the plan is deterministic.
// Each warp reads every pair's id, kChunksAhead chunks of 32 at a time.
// Small batches (decode) make the same plan in one block instead: a kernel's latency, not three.
#include "kernels/moe/expert_plan.h"

#include <algorithm>

#include <cub/block/block_scan.cuh>

#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ bool valid_expert(int32_t e, int32_t num_experts) { return e >= 0 && e < num_experts; }

// A warp walks the pairs in steps of kChunksAhead chunks of 32, loading a step's ids before it
// uses any of them, so that it waits for one load's latency per step rather than per chunk.
constexpr int kChunksAhead = 8;

// The ids of pairs base + 32 c + lane (0 past the end; callers test r < pairs).
__device__ __forceinline__ void load_ids(const ExpertPlanParams& p, int64_t base, int lane, int32_t (&ids)[kChunksAhead]) {
#pragma unroll
  for (int c = 0; c < kChunksAhead; ++c) {
    const int64_t r = base + 32 * c + lane;
    ids[c] = r < p.pairs ? p.experts[r] : 0;
  }
}

// Walks the pairs as expert e's warp: visit(r, in, id, ballot) for each lane's pair r (in: r <
// pairs; id: its expert id, 0 past the end), with the warp's ballot of the pairs that are e's.
template <typename Visit>
__device__ __forceinline__ void for_each_pair(const ExpertPlanParams& p, int32_t e, int lane, Visit&& visit) {
  for (int64_t base = 0; base < p.pairs; base += 32 * kChunksAhead) {
    int32_t ids[kChunksAhead];
    load_ids(p, base, lane, ids);
#pragma unroll
    for (int c = 0; c < kChunksAhead; ++c) {
      const int64_t r = base + 32 * c + lane;
      const bool in = r < p.pairs;
      visit(r, in, ids[c], __ballot_sync(0xffffffffu, in && ids[c] == e));
    }
  }
}

__global__ void count_pairs_kernel(ExpertPlanParams p) {
  pdl_wait();
  const int32_t e = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (e >= p.num_experts) return;
  int32_t n = 0;
  for_each_pair(p, e, lane, [&](int64_t, bool in, int32_t id, uint32_t ballot) {
    n += __popc(ballot);
    // Expert 0's warp also looks for ids no expert owns.
    if (e == 0 && in && !valid_expert(id, p.num_experts) && atomicCAS(p.fault, 0, kFaultExpertId) == 0) p.fault[1] = id;
  });
  if (lane == 0) p.count[e] = n;
}

// Rows [placed, pairs) belong to no expert (pairs whose id is out of range, reported through
// p.fault): they gather token 0 with weight 0 instead of whatever the buffers held, so the gather
// reads inside x until the fault surfaces at the next synchronisation.
__device__ void fill_unplaced_rows(const ExpertPlanParams& p, int64_t placed, int64_t first, int64_t stride) {
  for (int64_t i = placed + first; i < p.pairs; i += stride) {
    p.src_token[i] = 0;
    p.row_weight[i] = 0.0f;
  }
}

// One block of 32 threads: offsets and tile starts by a serial scan (a few hundred experts),
// then each thread writes the tiles of its experts.
__global__ void plan_tiles_kernel(ExpertPlanParams p) {
  pdl_wait();
  extern __shared__ int32_t first_tile[];  // [num_experts]
  __shared__ int32_t placed;
  if (threadIdx.x == 0) {
    int32_t rows = 0, tiles = 0;
    for (int32_t e = 0; e < p.num_experts; ++e) {
      p.offset[e] = rows;
      first_tile[e] = tiles;
      rows += p.count[e];
      tiles += (p.count[e] + p.tile_rows - 1) / p.tile_rows;
    }
    *p.tile_count = tiles;
    placed = rows;
  }
  __syncthreads();
  fill_unplaced_rows(p, placed, threadIdx.x, blockDim.x);
  for (int32_t e = threadIdx.x; e < p.num_experts; e += blockDim.x) {
    const int32_t c = p.count[e], begin = p.offset[e];
    for (int32_t j = 0; j * p.tile_rows < c; ++j)
      p.tiles[first_tile[e] + j] = {e, begin + j * p.tile_rows, min(p.tile_rows, c - j * p.tile_rows)};
  }
}

__global__ void place_pairs_kernel(ExpertPlanParams p) {
  pdl_wait();
  const int32_t e = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (e >= p.num_experts) return;
  int32_t next = p.offset[e];
  for_each_pair(p, e, lane, [&](int64_t r, bool in, int32_t id, uint32_t ballot) {
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

int64_t expert_plan_max_tiles(int64_t pairs, int32_t num_experts, int32_t tile_rows) {
  return (pairs + tile_rows - 1) / tile_rows + std::min<int64_t>(num_experts, pairs);
}

constexpr int kSmallThreads = 1024;
constexpr int64_t kSmallMaxPairs = 1024;

// The whole plan in one block of kSmallThreads, for num_experts <= kSmallThreads and pairs <=
// kSmallMaxPairs: thread e owns expert e (count, offset, tiles); pair r's rank within its expert
// is the number of earlier pairs with its id, so rows keep pair order as in the general path.
__global__ void __launch_bounds__(kSmallThreads) plan_small_kernel(ExpertPlanParams p) {
  pdl_wait();
  using Scan = cub::BlockScan<int32_t, kSmallThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t ids[kSmallMaxPairs];
  __shared__ int32_t count[kSmallThreads], offset[kSmallThreads];
  const int e = static_cast<int>(threadIdx.x);
  count[e] = 0;
  for (int64_t r = e; r < p.pairs; r += kSmallThreads) ids[r] = p.experts[r];
  __syncthreads();
  for (int64_t r = e; r < p.pairs; r += kSmallThreads) {
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
  fill_unplaced_rows(p, placed, e, kSmallThreads);
  __syncthreads();
  for (int64_t r = e; r < p.pairs; r += kSmallThreads) {
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

void expert_plan(const ExpertPlanParams& p, cudaStream_t stream) {
  if (p.num_experts <= 0) return;
  if (p.num_experts <= kSmallThreads && p.pairs <= kSmallMaxPairs) {
    launch_pdl(plan_small_kernel, 1, kSmallThreads, 0, stream, p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const unsigned blocks = static_cast<unsigned>((p.num_experts + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_pdl(count_pairs_kernel, blocks, kWarpsPerBlock * 32, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
  launch_pdl(plan_tiles_kernel, 1, 32, static_cast<size_t>(p.num_experts) * sizeof(int32_t), stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
  launch_pdl(place_pairs_kernel, blocks, kWarpsPerBlock * 32, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
