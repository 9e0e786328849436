// Sparse attention's prefill launches (a CTA a token running its splits in turn, over rows, not
// packed entries) on a warp-specialised WGMMA kernel: the same splits, partials, merge and bits as
// sparse_attn_wgmma's kernel, with its tile loop rebuilt so that the tensor cores need not wait
// for the softmax (ncu, docs/PERF.md session 59: that kernel's scores, softmax and value product
// ran one after another, both warpgroups meeting at four barriers a tile, the tensor pipe busy a
// quarter of the time).
//   - A producer warpgroup copies the queries, finds each split's entry rows and copies the
//     tiles (cp.async, two buffers), announcing a tile on its full barrier once its copies have
//     landed; the consumers free a buffer on its empty barrier.
//   - Two consumer warpgroups, each owning output dims 256 wg .. 256 wg + 255 of the 64 heads,
//     each computing the scores of the whole tile (m64n64k16: both compute the same scores, a
//     quarter more MMAs than one half each) and its softmax (softmax_tile's whole-tile form, the
//     half-tile form's arithmetic), so that neither waits for the other within a tile.
//   - The probabilities' three bf16 terms stay in registers as the value product's A operand
//     (the accumulator layout of the scores is the A fragment's), no shared memory between them;
//     a k16 step's MMAs are issued as soon as the softmax has made its terms.
// The splits' finish (finish_split), the last split's rows kept in shared memory and the merge
// (merge_splits) are sparse_attn_softmax.cuh's, run by the consumers. Measured (H100, session 59):
// an 8k prefill's CSA launches 6% faster, HCA's (2-3 tiles a token) 2.7% slower, so the plan takes
// it for tokens of 3 splits or more (SparseAttnMmaPlan::whole_tiles); the warpgroups taking turns
// at the scores' MMAs changed nothing. The splits' finish and merge are now half of the kernel.
#include <cstddef>
#include <cstdint>

#include "kernels/attention/sparse_attn_operands.cuh"
#include "kernels/attention/sparse_attn_softmax.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemm/wgmma.cuh"
#include "kernels/launch.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/per_device_once.h"

namespace dsv4::kernels::sparse_attn_tc {
namespace {

constexpr int kHeads = 64;                      // the MMAs' M: a warpgroup's rows
constexpr int kConsumerThreads = 256;           // two consumer warpgroups
constexpr int kThreads = kConsumerThreads + 128;  // and the producer warpgroup
constexpr int kProducerThreads = kThreads - kConsumerThreads;
constexpr int kStages = 2;
constexpr int kTileScores = 32;   // a lane's scores of a whole tile: 8 n8 slices x 2 rows x 2 entries

// setmaxnreg's registers a thread (as f16_wgmma_gemm's: 384 threads hold 168 each, and an increase
// beyond what the CTA holds would wait for ever): the producer only finds rows and copies.
constexpr int kProducerRegisters = 56;
constexpr int kConsumerRegisters = 224;
static_assert(kProducerThreads * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= kThreads * 168,
              "sparse_attn_wgmma_ws: setmaxnreg asks for more registers than the CTA holds");

// Named barriers (0 is __syncthreads' and merge_splits'): the producers' own, and the consumers'.
constexpr int kProducerBarrier = 1;
constexpr int kConsumerBarrier = 2;

struct Smem {
  uint8_t q[kOperandBytes];
  uint8_t kv[kStages][kOperandBytes];
  float staging[kConsumerThreads / 32][kStagedFloatsPerWarp];  // finish_split's workspace stores
  const uint16_t* row_of[2][kTilesPerSplit * kTile];            // the current split's entry rows, and the next's
  uint64_t full[kStages];   // a tile's rows landed: every producer thread's arrival
  uint64_t empty[kStages];  // a buffer consumed: every consumer thread's arrival
};
// The tiles need 1024-byte alignment, which the dynamic shared memory's start does not promise.
constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
static_assert(kSmemBytes <= 227 * 1024, "sparse_attn_wgmma_ws: shared memory exceeds Hopper's 227 KiB");
// The last split's rows and the merge's scratch (kLastRowsRoom) go where the queries and the
// entry tiles were (consumed by then).
static_assert(offsetof(Smem, q) == 0 && offsetof(Smem, kv) == kOperandBytes &&
                  offsetof(Smem, staging) == offsetof(Smem, kv) + sizeof(Smem::kv) &&
                  offsetof(Smem, staging) >= kLastRowsRoom,
              "sparse_attn_wgmma_ws: the last split's rows and the merge's scratch do not fit where the queries were");
static_assert(kHeads * (kMaxMergedSplits + 1) * sizeof(float) <= sizeof(Smem::kv),
              "sparse_attn_wgmma_ws: the merge's scratch does not fit in the entry tiles");

__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The producer warpgroup (thread pt of 128): the queries with tile 0, then every tile of the
// token's splits into buffer t % 2 once the consumers emptied it, each announced when it landed.
// A split's entry rows are found before its first tile's copies: split 0's first, split z + 1's
// once the consumers are done with split z - 1's tiles (whose row_of buffer it takes).
__device__ __forceinline__ void produce(const SparseAttnRowsParams& p, const TokenSplits& ts, int64_t i, int64_t head0,
                                        Smem& sm, int pt) {
  copy_queries<kProducerThreads>(p, i, head0, sm.q, pt);
  find_entry_rows<kProducerThreads>(p, ts, i, 0, pt, sm.row_of[0]);
  const int64_t tiles = (ts.entries + kTile - 1) / kTile;
  for (int64_t t = 0; t < tiles; ++t) {
    const int stage = static_cast<int>(t % kStages);
    const int64_t split = t / kTilesPerSplit;
    if (t >= kStages) barrier_wait(shared_address(&sm.empty[stage]), static_cast<uint32_t>(t / kStages - 1) & 1u);
    // Split `split + 1`'s rows into the buffer of split - 1's, whose last tile (t - 2) the
    // consumers are done with; its first tile is copied next.
    if (t % kTilesPerSplit == kTilesPerSplit - 1 && split + 1 < ts.splits)
      find_entry_rows<kProducerThreads>(p, ts, i, (split + 1) * kTilesPerSplit, pt, sm.row_of[(split + 1) & 1]);
    named_barrier(kProducerBarrier, kProducerThreads);  // every producer's rows are found before they are read
    copy_tile_rows<kProducerThreads>(sm.row_of[split & 1] + (t % kTilesPerSplit) * kTile, sm.kv[stage], pt);
    cp_async_commit();
    cp_async_wait<0>();
    fence_async_proxy();  // the copies and zero stores are seen by the MMAs (the async proxy)
    barrier_arrive(shared_address(&sm.full[stage]));
  }
}

// Consumer warpgroup wg's tile: the whole tile's scores, the softmax step, and its output dims'
// value product, the probabilities' terms as the A operand from registers (slice pair 2k, 2k + 1
// of the scores is k16 step k's A fragment: a[0] (row g, entries 2t..), a[1] (g + 8, 2t..), a[2]
// (g, 2t + 8..), a[3] (g + 8, 2t + 8..)).
__device__ __forceinline__ void consume_tile(const SparseAttnRowsParams& p, const uint16_t* const* tile_rows,
                                             uint32_t q_at, uint32_t kv_at, int wg, SoftmaxLane& sl,
                                             float (&o)[kOutputs]) {
  float s[kTileScores];
  issue_scores<kTile>(s, q_at, kv_at);
  wgmma_wait_all();
  fence_accumulators(s);

  // The value product, output dims 256 wg .. + 255 += the probabilities x the tile's rows, issued
  // k16 step by step as the softmax hands over its terms (smallest first), a step's A registers
  // in one of two sets, each reused once its step's MMAs are done.
  uint32_t a[2][3][4];  // [set][term lo, mid, hi][fragment register]
  float correction[2];
  softmax_tile<kHeads, 8>(s, sl, tile_rows, p.softmax_scale, nullptr, correction,
                          [&](int j, int r, uint32_t lo, uint32_t mid, uint32_t hi) {
                            const int k = j / 2, at = 2 * (j % 2) + r;
                            if (k >= 2 && at == 0) wgmma_wait<1>();  // step k - 2's MMAs are done with set k % 2
                            a[k % 2][0][at] = lo;
                            a[k % 2][1][at] = mid;
                            a[k % 2][2][at] = hi;
                            if (at < 3) return;
                            if (k == 0) {
                              rescale_outputs(o, correction);
                              fence_accumulators(o);
                            }
                            wgmma_fence();
                            const uint64_t desc_b =
                                wgmma_descriptor_mn_major(kv_at + 4 * wg * kBlockBytes + k * 16 * 128, kBlockBytes);
#pragma unroll
                            for (int term = 0; term < 3; ++term)
                              wgmma_m64n256k16_bf16_a_regs_mn_b(o, a[k % 2][term], desc_b);
                            wgmma_commit();
                          });
  wgmma_wait_all();
  fence_accumulators(o);
}

__global__ void __launch_bounds__(kThreads, 1) sparse_attn_wgmma_ws_kernel(SparseAttnRowsParams p, SplitWorkspace ws) {
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw + ((1024 - shared_address(smem_raw) % 1024) % 1024));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t i = ws.token0 + blockIdx.x;  // the batch token
  const int64_t head0 = static_cast<int64_t>(blockIdx.y) * kHeads;
  const TokenSplits ts = token_splits(p, i);
  const int64_t splits = ts.splits;
  if (splits == 0) return;  // the whole CTA: no entries
  init_stage_barriers(shared_address(sm.full), shared_address(sm.empty), kStages, kProducerThreads, kConsumerThreads);

  if (tid >= kConsumerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters) : "memory");
    produce(p, ts, i, head0, sm, tid - kConsumerThreads);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters) : "memory");
  const int wg = warp / 4, pair = warp % 4;  // the warpgroup (its output dims), and the warp's 16 heads within it
  // The last split's partial rows stay in shared memory where the queries and entry tiles were
  // (sparse_attn_wgmma's rule), the merge's scratch after them.
  const bool last_in_smem = splits > 1 && splits <= kMaxSplitsWithLastInSmem;
  float* const last_rows = reinterpret_cast<float*>(sm.q);
  const uint32_t q_at = shared_address(sm.q);
  int64_t t = 0;  // the token's tile
  for (int64_t split = 0; split < splits; ++split) {
    float o[kOutputs];
#pragma unroll
    for (float& v : o) v = 0.0f;
    SoftmaxLane sl{pair, wg, lane / 4, lane % 4, pair * 16 + lane / 4};
    const int64_t tile_end = split_tile_end(ts.entries, split * kTilesPerSplit);
    for (; t < tile_end; ++t) {
      const int stage = static_cast<int>(t % kStages);
      barrier_wait(shared_address(&sm.full[stage]), static_cast<uint32_t>(t / kStages) & 1u);
      consume_tile(p, sm.row_of[split & 1] + (t % kTilesPerSplit) * kTile, q_at, shared_address(sm.kv[stage]), wg,
                   sl, o);
      barrier_arrive(shared_address(&sm.empty[stage]));
    }
    const bool last_here = last_in_smem && split + 1 == splits;
    // The rows go where the queries were: both warpgroups are done with them.
    if (last_here) named_barrier(kConsumerBarrier, kConsumerThreads);
    // (Without the last-CTA merge's code, which these launches never take: inside the loop, it
    // made ptxas spill.)
    finish_split<kHeads, kConsumerThreads, kOutputs, 8, false>(p, ws, CtaWork{i, split}, head0, splits, sl, o,
                                                                256 * wg, true, nullptr, nullptr,
                                                                last_here ? last_rows : nullptr, sm.staging[warp]);
  }
  if (splits > 1) {
    named_barrier(kConsumerBarrier, kConsumerThreads);  // the CTA's partials are stored
    float* const scratch =
        last_in_smem ? last_rows + kLastRowsBytes / sizeof(float) : reinterpret_cast<float*>(sm.kv[0]);
    merge_splits<kHeads, kConsumerThreads>(p, ws, i, head0, splits, scratch, last_in_smem ? last_rows : nullptr, true);
  }
}

}  // namespace

void launch_sparse_attn_wgmma_ws(dim3 grid, cudaStream_t stream, const SparseAttnRowsParams& p,
                                 const SplitWorkspace& ws) {
  static PerDeviceOnce configured;
  once_per_device(configured, [] {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_wgmma_ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmemBytes)));
  });
  launch_pdl(sparse_attn_wgmma_ws_kernel, grid, kThreads, kSmemBytes, stream, p, ws);
}

}  // namespace dsv4::kernels::sparse_attn_tc
