// Tensor-core sparse attention on Hopper's warpgroup MMA (WGMMA) for launches of 64 heads a CTA
// (prefill, large decode batches): the same grid, entry tiles, splits and bits as
// sparse_attn_mma's mma.sync kernel (sparse_attn_softmax.cuh says what they share), with the
// MMAs issued by a warpgroup from shared memory instead of by each warp from registers:
//   - 2 warpgroups; warpgroup `half` computes the 64 heads' scores against entries 32 half ..
//     32 half + 31 of a tile (m64n32k16, 32 K steps: q and the tile from shared memory), so a
//     lane holds the scores the mma.sync kernel's warp (pair, half) holds, and runs the same
//     softmax step;
//   - the probabilities' three bf16 terms go to shared memory (64 heads x 64 entries each), and
//     warpgroup `half` multiplies them into output dims 256 half .. 256 half + 255 (m64n256k16,
//     the tile's rows as the MN-major B operand), per 16 entries lo, mid, then hi, as the mma.sync
//     kernel does;
//   - q, the double-buffered entry tiles and the probabilities sit in shared memory as WGMMA's
//     128-byte-swizzled tiles: a 64-row operand of 512 dims is 8 column blocks of 64 rows x 128
//     bytes, chunk c of row r at chunk c ^ (r % 8). An entry row is both the scores' K-major B row
//     (K = dims) and the value product's MN-major B row (K = entries, N = dims);
//   - over packed FP8 entries (p.packed) the tile's bytes go to a packed stage and are unpacked
//     into the one operand of rows (sparse_attn_mma.cu says how), the same bits;
//   - a CTA a split, or (kCtaPerToken, prefill; with the plan's whole_tiles over rows,
//     sparse_attn_wgmma_ws's kernel instead) a CTA a token that runs its splits in turn: the
//     queries copied once, the next split's entry rows found while the current split's first
//     scores are on the tensor cores and its first tile copied during the current split's last,
//     each split's partials stored as a split's CTA stores them and merged at the end;
//   - a split's workspace rows go out 16 bytes a store, a warp's rows staged in the probabilities'
//     shared memory (consumed by then) 32 dims at a time; not over packed entries, whose kernels
//     (at 255 registers already) spilled with it.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/sparse_attn_operands.cuh"
#include "kernels/attention/sparse_attn_softmax.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemm/wgmma.cuh"
#include "kernels/launch.cuh"
#include "kernels/per_device_once.h"

namespace dsv4::kernels::sparse_attn_tc {
namespace {

constexpr int kHeads = 64;                     // the MMA's M: a warpgroup's rows
constexpr int kThreads = 256;                  // two warpgroups

// Packed: one operand of rows, refilled from the packed tile once the previous tile is consumed
// (the next tile's copy runs while the current one computes); rows: two, filled by cp.async. The
// rows' operands and the probabilities after them (consumed) are merge_if_last's scratch.
template <bool Packed>
struct Smem {
  uint8_t q[kOperandBytes];
  uint8_t kv[Packed ? 1 : 2][kOperandBytes];
  uint8_t p[3][kBlockBytes];  // the probabilities' terms lo, mid, hi: 64 heads x 64 entries each
  float max_part[2][kHeads];  // per half: the tile's row maxima
  float sum_part[2][kHeads];  // per half: the final row sums
  // As in sparse_attn_mma.cu, for the current split and (kCtaPerToken) the next.
  const uint16_t* row_of[2][kTilesPerSplit * kTile];
  std::conditional_t<Packed, PackedStage<2>, NoPackedStage> packed;  // last: the empty one takes a byte
};
static_assert(kTilesPerSplit >= 2, "sparse_attn_wgmma: the next split's rows are found a tile before they are read");
// The tiles need 1024-byte alignment, which the dynamic shared memory's start does not promise.
template <bool Packed>
constexpr size_t kSmemBytes = sizeof(Smem<Packed>) + 1024;
static_assert(offsetof(Smem<true>, p) == offsetof(Smem<true>, kv) + sizeof(Smem<true>::kv) &&
                  kHeads * (kMaxMergedSplits + 1) * sizeof(float) <= sizeof(Smem<true>::kv) + sizeof(Smem<true>::p) &&
                  kHeads * (kMaxMergedSplits + 1) * sizeof(float) <= sizeof(Smem<false>::kv),
              "sparse_attn_wgmma: merge_if_last's scratch (the entry tiles and probabilities, consumed) is too small");

// The warps' staging rows of finish_split's workspace stores (store_rows_staged) in the
// probabilities' shared memory, consumed when a split ends.
static_assert(kThreads / 32 * kStagedFloatsPerWarp * sizeof(float) <= sizeof(Smem<false>::p) &&
                  sizeof(Smem<false>::p) == sizeof(Smem<true>::p),
              "sparse_attn_wgmma: the warps' staging rows do not fit in the probabilities' shared memory");

// The last split's rows and the merge's scratch (kLastRowsRoom) from the queries on: the queries,
// the entry tiles and the probabilities, all consumed when they are written.
template <bool Packed>
constexpr bool kLastRowsFit = offsetof(Smem<Packed>, q) == 0 && offsetof(Smem<Packed>, kv) == kOperandBytes &&
                              offsetof(Smem<Packed>, p) == offsetof(Smem<Packed>, kv) + sizeof(Smem<Packed>::kv) &&
                              offsetof(Smem<Packed>, p) + sizeof(Smem<Packed>::p) >= kLastRowsRoom;
static_assert(kLastRowsFit<false> && kLastRowsFit<true>,
              "sparse_attn_wgmma: the last split's rows and the merge's scratch do not fit where the queries were");

template <bool kCtaPerToken, bool Packed>
__global__ void __launch_bounds__(kThreads, 1) sparse_attn_wgmma_kernel(SparseAttnRowsParams p, SplitWorkspace ws) {
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  Smem<Packed>& sm = *reinterpret_cast<Smem<Packed>*>(smem_raw + ((1024 - shared_address(smem_raw) % 1024) % 1024));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int half = warp / 4, pair = warp % 4;  // the warpgroup, and the warp's 16 heads within it
  const CtaWork work = kCtaPerToken ? CtaWork{ws.token0 + blockIdx.x, 0} : cta_work(ws);
  const int64_t i = work.token;  // the batch token
  const int64_t head0 = static_cast<int64_t>(blockIdx.y) * kHeads;
  const TokenSplits ts = token_splits(p, i);
  const int64_t splits = ts.splits;
  if (work.split >= splits) return;  // the whole CTA: this token has fewer splits than the batch's most
  const int64_t split_end = kCtaPerToken ? splits : work.split + 1;
  // A CTA that runs its token's splits keeps the last one's partial rows in shared memory, where
  // the queries and entry tiles were (consumed by then), the merge's scratch after them, and
  // merges them from there: a fifth of a CSA token's partials neither stored nor loaded through L2.
  // Not over packed entries: that kernel, at 255 registers already, spilled with it.
  const bool last_in_smem = kCtaPerToken && !Packed && splits > 1 && splits <= kMaxSplitsWithLastInSmem;
  float* const last_rows = reinterpret_cast<float*>(sm.q);
  // The row_of buffer of split z (and with packed entries its scales_of buffer).
  auto rows_of = [&](int64_t z) { return sm.row_of[(z - work.split) & 1]; };
  auto scales_of = [&](int64_t z) {
    if constexpr (Packed) return sm.packed.scales_of[(z - work.split) & 1];
    else return static_cast<const uint8_t**>(nullptr);
  };
  // Finds split z's entry rows.
  auto find_rows = [&](int64_t z) {
    find_entry_rows<kThreads, Packed>(p, ts, i, z * kTilesPerSplit, tid, rows_of(z), scales_of(z));
  };

  // The 64 heads' queries (zeros past the last head), in the first cp.async group with tile 0.
  copy_queries<kThreads>(p, i, head0, sm.q, tid);
  find_rows(work.split);
  __syncthreads();
  // Thread tid copies chunk tid%64 of entries tid/64, tid/64 + 4, ... (a warp: half a row, 8
  // lanes a 128-byte swizzled row segment) of the tile whose entry rows are `rows`; missing
  // entries are zeros. Packed: the tile's entries (with their `scales`) into the packed stage,
  // unpacked into the one operand of rows at the start of the tile's step.
  auto load_tile = [&](const uint16_t* const* rows, const uint8_t* const* scales, int buf) {
    if constexpr (Packed) {
      copy_packed_tile<kThreads>(rows, scales, sm.packed.tile, tid);
    } else {
      copy_tile_rows<kThreads>(rows, sm.kv[buf], tid);
    }
  };
  const uint32_t q_at = shared_address(sm.q);

  if (work.split * kTilesPerSplit < split_tile_end(ts.entries, work.split * kTilesPerSplit))
    load_tile(rows_of(work.split), scales_of(work.split), 0);
  cp_async_commit();
  int buf = 0;  // the buffer of the CTA's current tile: its tiles alternate, across splits too
  for (int64_t split = work.split; split < split_end; ++split) {
    const int64_t tile_begin = split * kTilesPerSplit, tile_end = split_tile_end(ts.entries, tile_begin);
    const uint16_t* const* rows = rows_of(split);
    const uint8_t* const* scales = scales_of(split);
    const bool next_split = split + 1 < split_end;
    float o[kOutputs];
#pragma unroll
    for (float& v : o) v = 0.0f;
    SoftmaxLane sl{pair, half, lane / 4, lane % 4, pair * 16 + lane / 4};
    for (int64_t tile = tile_begin; tile < tile_end; ++tile, buf ^= Packed ? 0 : 1) {
      // The next tile: this split's, or the next split's first (its rows found a tile before).
      auto load_next = [&](int next_buf) {
        const int64_t next = (tile + 1 - tile_begin) * kTile;
        if (tile + 1 < tile_end) load_tile(rows + next, Packed ? scales + next : nullptr, next_buf);
        else if (next_split) load_tile(rows_of(split + 1), scales_of(split + 1), next_buf);
        cp_async_commit();
      };
      if constexpr (Packed) {
        cp_async_wait<0>();  // this tile's packed entries (and the queries) have landed
        __syncthreads();
        // An entry at a time: the outputs hold most of the registers.
        unpack_tile<kThreads, 1>(sm.packed.tile, tid, [&](int e, int c) { return sm.kv[0] + swizzled(e, c); });
        fence_async_proxy();  // the rows are seen by the MMAs (the async proxy)
        __syncthreads();      // ... whole, and the packed stage is free for the next tile
        load_next(0);
      } else {
        load_next(buf ^ 1);
        cp_async_wait<1>();  // all but the newest group (the next tile) have landed
        fence_async_proxy();  // the copies and zero stores are seen by the MMAs (the async proxy)
        __syncthreads();
      }
      const uint32_t kv_at = shared_address(sm.kv[buf]);

      // Scores of the 64 heads against entries 32 half .. + 31.
      float s[kScores];
      issue_scores<32>(s, q_at, kv_at + half * 32 * 128);
      // The next split's entry rows, their dependent loads under the scores' MMAs (its buffer's
      // last reader, the split before this one, is done).
      if (next_split && tile == tile_begin) find_rows(split + 1);
      wgmma_wait_all();
      fence_accumulators(s);

      float correction[2];
      softmax_tile<kHeads>(s, sl, rows + (tile - tile_begin) * kTile, p.softmax_scale, sm.max_part, correction,
                           [&](int j, int r, uint32_t lo, uint32_t mid, uint32_t hi) {
                             const int col = sl.half * 32 + 8 * j + 2 * sl.t;  // the pair's first entry
                             const int at = swizzled(sl.row0 + 8 * r, col / 8) + (col % 8) * 2;
                             *reinterpret_cast<uint32_t*>(sm.p[0] + at) = lo;
                             *reinterpret_cast<uint32_t*>(sm.p[1] + at) = mid;
                             *reinterpret_cast<uint32_t*>(sm.p[2] + at) = hi;
                           });
      rescale_outputs(o, correction);
      fence_async_proxy();  // the probabilities are seen by the MMAs
      __syncthreads();      // every head's probabilities (both warpgroups' entries) are written

      // Output dims 256 half .. + 255 += the probabilities x the tile's rows, 16 entries a step,
      // smallest term first.
      fence_accumulators(o);
      wgmma_fence();
#pragma unroll
      for (int k0 = 0; k0 < kTile; k0 += 16) {
        const uint64_t desc_b = wgmma_descriptor_mn_major(kv_at + 4 * half * kBlockBytes + k0 * 128, kBlockBytes);
#pragma unroll
        for (int term = 0; term < 3; ++term)
          wgmma_m64n256k16_bf16_mn_b(o, wgmma_descriptor(shared_address(sm.p[term]) + k0 * 2), desc_b);
      }
      wgmma_commit();
      wgmma_wait_all();
      fence_accumulators(o);
      __syncthreads();  // this buffer and the probabilities are consumed before they are refilled
    }
    finish_split<kHeads, kThreads>(p, ws, CtaWork{i, split}, head0, splits, sl, o, 256 * sl.half, true, sm.sum_part,
                                   reinterpret_cast<float*>(sm.kv[0]),
                                   last_in_smem && split + 1 == split_end ? last_rows : nullptr,
                                   Packed ? nullptr : reinterpret_cast<float*>(sm.p[0]) + warp * kStagedFloatsPerWarp);
  }
  if (kCtaPerToken && splits > 1) {
    __syncthreads();  // the CTA's partials are stored (and the entry tiles consumed: the scratch)
    float* const scratch = last_in_smem ? last_rows + kLastRowsBytes / sizeof(float) : reinterpret_cast<float*>(sm.kv[0]);
    merge_splits<kHeads, kThreads>(p, ws, i, head0, splits, scratch, last_in_smem ? last_rows : nullptr, true);
  }
}

// The kernel for rows or packed entries, its shared memory attribute set once per device.
template <bool Packed>
void launch_for(dim3 grid, bool cta_per_token, cudaStream_t stream, const SparseAttnRowsParams& p,
                const SplitWorkspace& ws) {
  static PerDeviceOnce configured;
  once_per_device(configured, [] {
    for (const void* kernel : {reinterpret_cast<const void*>(sparse_attn_wgmma_kernel<false, Packed>),
                               reinterpret_cast<const void*>(sparse_attn_wgmma_kernel<true, Packed>)})
      DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSmemBytes<Packed>)));
  });
  if (cta_per_token) launch_pdl(sparse_attn_wgmma_kernel<true, Packed>, grid, kThreads, kSmemBytes<Packed>, stream, p, ws);
  else launch_pdl(sparse_attn_wgmma_kernel<false, Packed>, grid, kThreads, kSmemBytes<Packed>, stream, p, ws);
}

}  // namespace

void launch_sparse_attn_wgmma(dim3 grid, bool cta_per_token, bool whole_tiles, cudaStream_t stream,
                              const SparseAttnRowsParams& p, const SplitWorkspace& ws) {
  if (!p.packed && cta_per_token && whole_tiles) launch_sparse_attn_wgmma_ws(grid, stream, p, ws);
  else if (p.packed) launch_for<true>(grid, cta_per_token, stream, p, ws);
  else launch_for<false>(grid, cta_per_token, stream, p, ws);
}

}  // namespace dsv4::kernels::sparse_attn_tc
