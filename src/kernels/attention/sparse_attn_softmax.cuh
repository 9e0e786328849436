// What the tensor-core sparse attention kernels (sparse_attn_mma.cu on mma.sync, sparse_attn_wgmma.cu
// and sparse_attn_wgmma_ws.cu on WGMMA) share so that they give the same bits: the cut of a token's
// entries into 64-entry tiles and splits, the splits' scratch, one tile's online-softmax step on a
// lane's scores, and the finish of a lane's output rows. The kernels give a lane the same scores
// and output dims (the m16n8 accumulator layout: lane (g, t) of warp `pair` of half `half` holds
// heads 16 pair + g and + 8, entries 32 half + 8j + 2t (+1) of a tile, and output dims
// 256 half + 8j + 2t (+1), or the same walk over a part of them; sparse_attn_wgmma_ws's lanes hold
// both halves' entries, softmax_tile's whole-tile form), so every fp32 operation happens in the
// same order.
#pragma once

#include <cstdint>

#include "core/numeric.h"
#include "kernels/attention/pack_entries.cuh"
#include "kernels/attention/sparse_attn_entries.cuh"
#include "kernels/attention/sparse_attn_mma.h"
#include "kernels/bf16_cast.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/l2_scratch.cuh"
#include "kernels/last_block.cuh"

namespace dsv4::kernels::sparse_attn_tc {

constexpr int kD = static_cast<int>(kSparseAttnMmaHeadDim);
constexpr int kTile = 64;              // entries per tile
constexpr int64_t kTilesPerSplit = 2;  // a split: 128 entries (CSA decode: 5 CTAs per token)
constexpr int kScores = 16;            // a lane's scores of a tile: 4 n8 slices x 2 rows x 2 entries
constexpr int kOutputs = 128;          // a lane's output sums over 256 dims: 32 n8 slices x 2 rows x 2 dims

// Partial results of the splits of the launch's tokens token0, token0 + 1, ...: rows of 512
// floats at out[((token - token0) * heads + head) * max_splits + split], and (max, sum) pairs at
// the same index. With `arrivals` (zeroed before the launch: a count per (token - token0, head
// block)) the last split of a token to store its partials merges them (merge_if_last); without,
// sparse_attn_mma_combine does.
struct SplitWorkspace {
  float* out = nullptr;
  float2* max_sum = nullptr;
  unsigned* arrivals = nullptr;
  int64_t token0 = 0;
  int max_splits = 1;
};

// A launch's grid: x = (token - token0) * max_splits + split, so that a token's splits run side by
// side (its queries are read from memory once, then from L2); y = the head block.
struct CtaWork {
  int64_t token;
  int64_t split;
};

__device__ __forceinline__ CtaWork cta_work(const SplitWorkspace& ws) {
  return {ws.token0 + blockIdx.x / ws.max_splits, static_cast<int64_t>(blockIdx.x % ws.max_splits)};
}

__device__ __forceinline__ int64_t split_count(int64_t entries) {
  return ((entries + kTile - 1) / kTile + kTilesPerSplit - 1) / kTilesPerSplit;
}

// A CTA's batch token: its sequence, position, entry count and the splits those make.
struct TokenSplits {
  SparseAttnSeq seq;
  int64_t pos, entries, splits;
};

__device__ __forceinline__ TokenSplits token_splits(const SparseAttnRowsParams& p, int64_t token) {
  const SparseAttnSeq seq = p.seqs[p.seq_of_token[token]];
  const int64_t pos = p.positions[token];
  const int64_t entries = entry_count(p, pos);
  return {seq, pos, entries, split_count(entries)};
}

// The end of the split's tiles [tile_begin, end) of a token's `entries`, the split starting at
// tile_begin = split * kTilesPerSplit.
__device__ __forceinline__ int64_t split_tile_end(int64_t entries, int64_t tile_begin) {
  const int64_t tiles = (entries + kTile - 1) / kTile;
  return tile_begin + kTilesPerSplit < tiles ? tile_begin + kTilesPerSplit : tiles;
}

// The rows of the split's entries from tile `tile_begin` on, for the tiles' copies: row_of[e] for
// entry tile_begin * kTile + e, nullptr where it is missing or invalid (thread tid of kThreads).
// With packed entries (kPacked, p.packed) row_of[e] is the entry's data bytes (read as bytes, not
// bf16) and scales_of[e] its scale bytes.
template <int kThreads, bool kPacked = false>
__device__ __forceinline__ void find_entry_rows(const SparseAttnRowsParams& p, const TokenSplits& ts, int64_t token,
                                                int64_t tile_begin, int tid, const uint16_t** row_of,
                                                const uint8_t** scales_of = nullptr) {
  for (int e = tid; e < kTilesPerSplit * kTile; e += kThreads) {
    const int64_t entry = tile_begin * kTile + e;
    const EntrySource src = entry < ts.entries ? entry_source(p, ts.seq, token, ts.pos, entry) : EntrySource{};
    if (!src.valid) {
      row_of[e] = nullptr;
    } else if constexpr (kPacked) {
      const Fp8CacheLayout layout{static_cast<int>(src.page_rows)};
      const auto* pages = static_cast<const uint8_t*>(src.rows.data);
      row_of[e] = reinterpret_cast<const uint16_t*>(pages + layout.data_offset(src.row));
      scales_of[e] = pages + layout.scale_offset(src.row);
    } else {
      row_of[e] = static_cast<const uint16_t*>(src.rows.data) + src.row * kD;
    }
  }
}

// A tile's packed entries as copied from their pages, before unpack_tile turns them into bf16
// rows: 64 entries' 576 data bytes (448 e4m3 codes, 64 bf16 rope dims) and 8 scale bytes.
struct PackedTile {
  alignas(16) uint8_t data[kTile][Fp8CacheLayout::kDataBytes];
  uint8_t scales[kTile][Fp8CacheLayout::kScaleBytes];
};

// A kernel's shared memory for packed entries: the tile as copied, and the entries' scale bytes
// (as its row_of) for `Splits` splits (the CTA's one, or the current and the next in turn);
// NoPackedStage where the kernel reads rows.
template <int Splits>
struct PackedStage {
  PackedTile tile;
  const uint8_t* scales_of[Splits][kTilesPerSplit * kTile];
};
struct NoPackedStage {};

// Starts the copies of the entries `rows` (with their `scales`) into `tile`, a warp an entry: an
// entry's data in 16-byte pieces where it is 16-byte aligned (pages of an even number of
// entries), else in 8-byte ones (every entry's alignment); a missing entry (nullptr) gets zero
// codes and scales, which unpack to zeros. Thread tid of kThreads; the caller commits and waits.
template <int kThreads>
__device__ __forceinline__ void copy_packed_tile(const uint16_t* const* rows, const uint8_t* const* scales,
                                                 PackedTile& tile, int tid) {
  constexpr int kData = Fp8CacheLayout::kDataBytes;
  const int warp = tid / 32, lane = tid % 32;
  for (int e = warp; e < kTile; e += kThreads / 32) {
    const auto* data = reinterpret_cast<const uint8_t*>(rows[e]);
    uint8_t* dst = tile.data[e];
    if (data == nullptr) {
      for (int at = 16 * lane; at < kData; at += 16 * 32) *reinterpret_cast<uint4*>(dst + at) = make_uint4(0, 0, 0, 0);
      if (lane == 0) *reinterpret_cast<uint2*>(tile.scales[e]) = make_uint2(0, 0);
    } else if (reinterpret_cast<uintptr_t>(data) % 16 == 0) {
      for (int at = 16 * lane; at < kData; at += 16 * 32) cp_async16(dst + at, data + at);
      if (lane == 31) cp_async8(tile.scales[e], scales[e]);
    } else {
      for (int at = 8 * lane; at < kData; at += 8 * 32) cp_async8(dst + at, data + at);
      if (lane == 31) cp_async8(tile.scales[e], scales[e]);
    }
  }
}

// The copied tile's entries as 512 bf16 values each, stored 16 bytes (8 dims) at a time at
// chunk_at(e, c) (chunk c of entry e's row in the kernel's tile layout): thread tid of kThreads
// takes chunk tid % 64 of entries tid / 64, tid / 64 + kThreads / 64, ..., eight at a time with
// their loads first (kMaxBatch at a time, fewer where registers are short). The same values as
// decode_fp8_entry, so the same bits as rows (missing entries were copied as zeros).
template <int kThreads, int kMaxBatch = 8, typename ChunkAt>
__device__ __forceinline__ void unpack_tile(const PackedTile& tile, int tid, ChunkAt chunk_at) {
  using L = Fp8CacheLayout;
  constexpr int kChunks = kD / 8, kNopeChunks = L::kNopeDim / 8;
  constexpr int kEntryStep = kThreads / kChunks, kEntries = kTile / kEntryStep;  // per thread
  constexpr int kBatch = kEntries < kMaxBatch ? kEntries : kMaxBatch;
  static_assert(kThreads % kChunks == 0 && kEntries % kBatch == 0, "unpack_tile: threads and chunks do not divide");
  const int c = tid % kChunks, e0 = tid / kChunks;
#pragma unroll(kBatch > 1 ? kEntries / kBatch : 1)
  for (int b = 0; b < kEntries; b += kBatch) {
    uint4 v[kBatch];
    if (c < kNopeChunks) {
      uint2 codes[kBatch];
      uint8_t scale[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int e = e0 + (b + i) * kEntryStep;
        codes[i] = *reinterpret_cast<const uint2*>(tile.data[e] + 8 * c);
        scale[i] = tile.scales[e][c * 8 / L::kQuantBlock];
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) v[i] = e4m3x8_to_bf16x8(codes[i], e8m0_value(scale[i]));
    } else {
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        v[i] = *reinterpret_cast<const uint4*>(tile.data[e0 + (b + i) * kEntryStep] + L::kNopeDim + 16 * (c - kNopeChunks));
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) *reinterpret_cast<uint4*>(chunk_at(e0 + (b + i) * kEntryStep, c)) = v[i];
  }
}

// The two warps of a pair (64 threads) meet; barrier 0 stays __syncthreads'.
__device__ __forceinline__ void pair_barrier(int pair) {
  asm volatile("bar.sync %0, 64;\n" ::"r"(pair + 1) : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// A lane's place in the accumulator layout and its running softmax state. A lane holds half a
// tile's scores (4 n8 slices: the mma.sync kernel's warps and sparse_attn_wgmma's, `half` saying
// which 32 entries) or a whole tile's (8 slices: sparse_attn_wgmma_ws's, one warpgroup all 64).
struct SoftmaxLane {
  int pair, half, g, t;
  int row0;                                   // 16 pair + g: the first of the lane's two heads
  float row_max[2] = {-INFINITY, -INFINITY};  // heads row0, row0 + 8
  // row_sum[q][r]: head row0 + 8 r over this lane's entries of tile half q (a half-tile lane: its
  // own half's in q = 0), kept apart so that a whole-tile lane sums in the half-tile lanes' order.
  float row_sum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
};

// One tile's step on the lane's scores s (kSlices n8 slices, s[4j + c]: head row0 + 8 (c / 2),
// entry e0 + 8j + 2t + (c & 1), e0 = 32 half for a half-tile lane (kSlices 4), 0 for a whole-tile
// one (8)): masks the missing entries (row_of[entry] == nullptr), scales, takes the running maxima
// over the tile's 64 entries (a half-tile lane agrees with the other half of its pair through
// `max_part`, the pair's rows of both halves, [2][heads]), turns the scores into probabilities and
// adds them to the row sums. Returns in `correction` what the output sums must be multiplied by,
// and hands each probability as three bf16 terms (hi = bf16(p), mid = bf16(p - hi), lo = bf16(p -
// hi - mid): all 24 bits of fp32, each difference exact) to store(slice j, row r (head row0 + 8 r),
// lo pair, mid pair, hi pair), two entries (8j + 2t, + 1 of the lane's slices) at a time. Both
// forms compute every value in the same order, so they give the same bits.
template <int kHeads, int kSlices = 4, typename StoreTerms>
__device__ __forceinline__ void softmax_tile(float (&s)[4 * kSlices], SoftmaxLane& lane, const uint16_t* const* row_of,
                                             float softmax_scale, float (*max_part)[kHeads], float (&correction)[2],
                                             StoreTerms&& store) {
  static_assert(kSlices == 4 || kSlices == 8, "softmax_tile: half a tile's slices or a whole tile's");
  constexpr bool kHalfTile = kSlices == 4;
  const int e0 = kHalfTile ? lane.half * 32 : 0;
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kSlices; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int entry = e0 + j * 8 + 2 * lane.t + (c & 1);
      float& v = s[4 * j + c];
      v = row_of[entry] != nullptr ? v * softmax_scale : -INFINITY;
      tile_max[c / 2] = fmaxf(tile_max[c / 2], v);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
  }
  if constexpr (kHalfTile) {
    if (lane.t == 0) {
      max_part[lane.half][lane.row0] = tile_max[0];
      max_part[lane.half][lane.row0 + 8] = tile_max[1];
    }
    pair_barrier(lane.pair);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // (fmaxf is exact, so the order of the maxima does not matter)
    const float tile = kHalfTile ? fmaxf(tile_max[r], max_part[lane.half ^ 1][lane.row0 + 8 * r]) : tile_max[r];
    const float m_new = fmaxf(lane.row_max[r], tile);
    correction[r] = m_new == -INFINITY ? 1.0f : expf(lane.row_max[r] - m_new);  // 0 after -inf
    lane.row_max[r] = m_new;
  }
#pragma unroll
  for (int i = 0; i < 4 * kSlices; ++i) {
    const float m = lane.row_max[(i % 4) / 2];
    s[i] = m == -INFINITY ? 0.0f : expf(s[i] - m);  // 0 for missing entries
  }
#pragma unroll
  for (int q = 0; q < kSlices / 4; ++q)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      lane.row_sum[q][r] *= correction[r];
#pragma unroll
      for (int j = 4 * q; j < 4 * q + 4; ++j) lane.row_sum[q][r] += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
    }
#pragma unroll
  for (int j = 0; j < kSlices; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float rest0 = s[4 * j + 2 * r], rest1 = s[4 * j + 2 * r + 1];
      uint32_t terms[3];  // hi, mid, lo: each a bf16 pair (entries 2t, 2t + 1)
#pragma unroll
      for (int k = 0; k < 3; ++k) {
        terms[k] = float2_to_bf16x2_unless_nan(rest0, rest1);  // a NaN only feeds MMAs: its payload is moot
        rest0 -= __uint_as_float(terms[k] << 16);
        rest1 -= __uint_as_float(terms[k] & 0xffff0000u);
      }
      store(j, r, terms[2], terms[1], terms[0]);
    }
}

// The output sums o (o[4j + c]: head row0 + 8 (c / 2), dim dim0 + 8j + 2t + (c & 1), dim0 the
// lane's first output dim) times the tile's correction.
template <int kLaneOutputs>
__device__ __forceinline__ void rescale_outputs(float (&o)[kLaneOutputs], const float (&correction)[2]) {
#pragma unroll
  for (int i = 0; i < kLaneOutputs; ++i) o[i] *= correction[(i % 4) / 2];
}

// The most splits merge_if_last takes: 64 heads' weights fill 64 KB of scratch (the WGMMA
// kernel's two entry tiles hold 128 KB).
constexpr int64_t kMaxMergedSplits = 256;

// A split's partial rows of a CTA's 64 heads kept in shared memory instead of the workspace: head
// h's 512 floats at kLastRowStride h, rows padded by 16 bytes so that finish_split's stores (8
// heads x 4 lanes a warp, 8 bytes each) take two wavefronts, as many as their bytes need, and an
// address is a row's base plus a constant; merge_splits' loads (a warp a head) are contiguous.
constexpr int kLastRowStride = kD + 4;
constexpr size_t kLastRowsBytes = 64 * kLastRowStride * sizeof(float);

// The most splits a token may have for its last split's rows to stay in shared memory, and the
// merge's scratch (kHeads x (splits + 1) floats) to follow them, in a kernel's kLastRowsRoom bytes.
constexpr size_t kLastRowsRoom = 152 * 1024;
constexpr int64_t kMaxSplitsWithLastInSmem =
    static_cast<int64_t>((kLastRowsRoom - kLastRowsBytes) / (64 * sizeof(float))) - 1;

// Merges a token's splits into the output of its kHeads heads from head0 on, the CTA's first
// kThreads threads calling it once the splits' partials are visible to them: sparse_attn_mma_combine's
// arithmetic in its order, so the same bits. First each head's max m over the splits, its weights
// w_z = e^(m_z - m) and den = e^(sink - m) + sum over z of s_z w_z, s_z split z's sum (in
// `scratch`, kHeads x (splits + 1) floats of shared memory), then a warp a head: lane l sums dims
// 4l + 128c .. + 3 (c < 4) over the splits, sixteen 16-byte loads in flight, so the partials
// (read through L2) stream at L2's rate. `last_rows`, unless null, holds the last split's rows
// in shared memory (kLastRowStride apart) in place of its workspace rows. `discard_read` drops the
// workspace rows' lines from L2 once they are read, so that they are not written to DRAM: a CTA
// that runs its token's splits merges them soon after storing them, and most are still in L2
// then, while the launch's partials outgrow it (an 8k prefill's CSA launch -8%, docs/PERF.md
// session 47). No other reader may want them: the combine kernel and last-CTA merges keep them.
template <int kHeads, int kThreads>
__device__ __forceinline__ void merge_splits(const SparseAttnRowsParams& p, const SplitWorkspace& ws, int64_t token,
                                             int64_t head0, int64_t splits, float* scratch,
                                             const float* last_rows = nullptr, bool discard_read = false) {
  const int64_t row0 = (token - ws.token0) * p.heads;  // the launch's partial rows of head 0
  float* dens = scratch;                                 // [kHeads]: 0 where no entry was valid
  float* weights = scratch + kHeads;                     // [kHeads][splits]
  for (int h = threadIdx.x; h < kHeads; h += kThreads) {
    const int64_t head = head0 + h;
    if (head >= p.heads) continue;
    const float2* ms = ws.max_sum + (row0 + head) * ws.max_splits;
    float m = -INFINITY;
    for (int64_t z = 0; z < splits; ++z) m = fmaxf(m, __ldcg(ms + z).x);
    float den = 0.0f;
    if (m != -INFINITY) {
      den = expf(load_float(p.sink, head) - m);
      for (int64_t z = 0; z < splits; ++z) {
        const float2 max_sum = __ldcg(ms + z);
        const float w = expf(max_sum.x - m);  // 0 for a split without valid entries (max -inf)
        den += max_sum.y * w;
        weights[h * splits + z] = w;
      }
    }
    dens[h] = den;
  }
  asm volatile("bar.sync 0, %0;\n" ::"n"(kThreads) : "memory");  // __syncthreads' barrier, for kThreads of the CTA
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t global_splits = last_rows != nullptr ? splits - 1 : splits;  // the splits read from the workspace
  for (int h = warp; h < kHeads; h += kThreads / 32) {
    const int64_t head = head0 + h;
    if (head >= p.heads) continue;
    const float den = dens[h];
    const float* part = ws.out + (row0 + head) * ws.max_splits * kD + 4 * lane;
    float acc[4][4] = {};
    // Split z's rows (from the workspace, or the last from shared memory) weighted into acc.
    auto add_split = [&](int64_t z, auto load) {
      const float w = weights[h * splits + z];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 v = load(c);
        acc[c][0] += v.x * w;
        acc[c][1] += v.y * w;
        acc[c][2] += v.z * w;
        acc[c][3] += v.w * w;
      }
    };
    if (den != 0.0f) {
#pragma unroll 4
      for (int64_t z = 0; z < global_splits; ++z)
        add_split(z, [&](int c) { return __ldcg(reinterpret_cast<const float4*>(part + z * kD + 128 * c)); });
      if (last_rows != nullptr)
        add_split(splits - 1, [&](int c) {
          return *reinterpret_cast<const float4*>(last_rows + kLastRowStride * h + 4 * lane + 128 * c);
        });
    }
    if (discard_read) {
      // The head's partial rows are read (their values summed, every lane past the warp's sync):
      // their lines leave L2 without going to DRAM, a line a lane of every eight.
      __syncwarp();
      if (lane % 8 == 0) {
        for (int64_t z = 0; z < global_splits; ++z)
#pragma unroll
          for (int c = 0; c < 4; ++c) discard_l2_line(part + z * kD + 128 * c);
      }
    }
    auto* out = static_cast<uint16_t*>(p.out.data) + (token * p.heads + head) * kD + 4 * lane;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float* a = acc[c];
      *reinterpret_cast<uint2*>(out + 128 * c) =
          den == 0.0f ? make_uint2(0, 0)
                      : make_uint2(pack_bf16(float_to_bf16(a[0] / den), float_to_bf16(a[1] / den)),
                                   pack_bf16(float_to_bf16(a[2] / den), float_to_bf16(a[3] / den)));
    }
  }
}

// Called by every thread of a split's CTA (kThreads) after it stored its partials, with ws.arrivals
// set: the last of the token's splits to arrive merges them all (merge_splits).
template <int kHeads, int kThreads>
__device__ __forceinline__ void merge_if_last(const SparseAttnRowsParams& p, const SplitWorkspace& ws,
                                              const CtaWork& work, int64_t head0, int64_t splits, float* scratch) {
  unsigned* const arrivals = ws.arrivals + (work.token - ws.token0) * gridDim.y + blockIdx.y;
  if (!last_block_to_arrive(arrivals, static_cast<unsigned>(splits))) return;
  merge_splits<kHeads, kThreads>(p, ws, work.token, head0, splits, scratch);
}

// Rows of a warp's split partials staged in shared memory (finish_split's `staging`): its 16 heads
// x 32 dims at a time, rows kStagedRowStride floats apart, so that the lanes' 8-byte writes (8
// heads x 4 lanes a half-warp) and their 16-byte reads (a quarter-warp a row's 128 bytes) take as
// many wavefronts as their bytes need.
constexpr int kStagedRowStride = 40;
constexpr int kStagedFloatsPerWarp = 16 * kStagedRowStride;

// A warp's partial rows o (heads 16 pair .. + 15 of the CTA from `rows`, rows `row_stride` floats
// apart, lane (g, t) holding heads g and g + 8 at dims dim0 + 8j + 2t, +1) stored 16 bytes a store
// by whole rows through the warp's `staging`: half the store instructions of the lanes' 8-byte
// pieces, which ncu found throttling the CTA-a-token prefill launches (lg_throttle, docs/PERF.md
// session 47). `heads` is how many of the 16 are real.
template <int kLaneOutputs>
__device__ __forceinline__ void store_rows_staged(const float (&o)[kLaneOutputs], float* rows, int64_t row_stride,
                                                  int dim0, int heads, float* staging, int g, int t) {
  constexpr int kSlices = kLaneOutputs / 4;
  static_assert(kSlices % 4 == 0, "store_rows_staged: whole 32-dim chunks");
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int c = 0; c < kSlices / 4; ++c) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int j = 4 * c + jj;
        *reinterpret_cast<float2*>(staging + (g + 8 * r) * kStagedRowStride + 8 * jj + 2 * t) =
            make_float2(o[4 * j + 2 * r], o[4 * j + 2 * r + 1]);
      }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int e = lane + 32 * k, h = e / 8, q = e % 8;
      if (h < heads)
        *reinterpret_cast<float4*>(rows + h * row_stride + dim0 + 32 * c + 4 * q) =
            *reinterpret_cast<const float4*>(staging + h * kStagedRowStride + 4 * q);
    }
    __syncwarp();
  }
}

// The end of a split: row sums over the quad, then over the pair (`sum_part` as max_part above;
// a whole-tile lane, kScoreSlices 8, adds its two halves' sums instead); a token of one split gets
// its output (with the sink) in bf16, a split of several its partial output, row max and sum in
// the workspace, merged by merge_if_last (with ws.arrivals, which only sparse_attn_wgmma's
// launches set; `scratch` as it says; kLastCtaMerges false leaves that code out) or by
// sparse_attn_mma_combine. The lane's
// outputs o are dims dim0 + 8j + 2t (+1), j < kLaneOutputs / 4 (a CTA may own a part of the 512
// dims, sparse_attn_mma.cu's dim parts; `writes_max_sum`: the CTA of the split that stores its max
// and sum, every part holding the same). `last_rows`, unless null, takes the partial rows instead
// of the workspace, in shared memory (kLastRowStride apart: the CTA's 64 heads, all 512 dims).
// `staging`, unless null, is the warp's kStagedFloatsPerWarp floats of shared memory through which
// the workspace rows go (store_rows_staged). Every thread of the CTA (kThreads) calls it.
template <int kHeads, int kThreads, int kLaneOutputs, int kScoreSlices = 4, bool kLastCtaMerges = true>
__device__ __forceinline__ void finish_split(const SparseAttnRowsParams& p, const SplitWorkspace& ws,
                                             const CtaWork& work, int64_t head0, int64_t splits, SoftmaxLane& lane,
                                             const float (&o)[kLaneOutputs], int dim0, bool writes_max_sum,
                                             float (*sum_part)[kHeads], float* scratch, float* last_rows = nullptr,
                                             float* staging = nullptr) {
  constexpr int kSlices = kLaneOutputs / 4;
  constexpr bool kHalfTile = kScoreSlices == 4;  // softmax_tile's lane forms: the other half's sums in sum_part
#pragma unroll
  for (int q = 0; q < kScoreSlices / 4; ++q)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      lane.row_sum[q][r] += __shfl_xor_sync(0xffffffffu, lane.row_sum[q][r], 1);
      lane.row_sum[q][r] += __shfl_xor_sync(0xffffffffu, lane.row_sum[q][r], 2);
    }
  if constexpr (kHalfTile) {
    if (lane.t == 0) {
      sum_part[lane.half][lane.row0] = lane.row_sum[0][0];
      sum_part[lane.half][lane.row0 + 8] = lane.row_sum[0][1];
    }
    pair_barrier(lane.pair);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t head = head0 + lane.row0 + 8 * r;
    if (head >= p.heads) continue;
    // The two halves' sums added (in either order: the same bits).
    const float other = kHalfTile ? sum_part[lane.half ^ 1][lane.row0 + 8 * r] : lane.row_sum[1][r];
    const float sum = lane.row_sum[0][r] + other;
    const float m = lane.row_max[r];
    const int64_t row = work.token * p.heads + head;
    if (splits == 1) {
      const float den = sum + expf(load_float(p.sink, head) - m);
      auto* out = static_cast<uint16_t*>(p.out.data) + row * kD;
#pragma unroll
      for (int j = 0; j < kSlices; ++j) {
        const int dim = dim0 + j * 8 + 2 * lane.t;
        const float v0 = m == -INFINITY ? 0.0f : o[4 * j + 2 * r] / den;
        const float v1 = m == -INFINITY ? 0.0f : o[4 * j + 2 * r + 1] / den;
        *reinterpret_cast<uint32_t*>(out + dim) = pack_bf16(float_to_bf16(v0), float_to_bf16(v1));
      }
    } else {
      const int64_t at = ((work.token - ws.token0) * p.heads + head) * ws.max_splits + work.split;
      if (last_rows != nullptr || staging == nullptr) {
        float* out = last_rows != nullptr ? last_rows + kLastRowStride * (lane.row0 + 8 * r) : ws.out + at * kD;
#pragma unroll
        for (int j = 0; j < kSlices; ++j)
          *reinterpret_cast<float2*>(out + dim0 + j * 8 + 2 * lane.t) =
              make_float2(o[4 * j + 2 * r], o[4 * j + 2 * r + 1]);
      }
      if (writes_max_sum && lane.half == 0 && lane.t == 0) ws.max_sum[at] = make_float2(m, sum);
    }
  }
  if (splits > 1 && last_rows == nullptr && staging != nullptr) {
    const int64_t warp_head0 = head0 + lane.row0 - lane.g;  // the warp's first head
    const int64_t at = ((work.token - ws.token0) * p.heads + warp_head0) * ws.max_splits + work.split;
    const int64_t real = p.heads - warp_head0;
    store_rows_staged(o, ws.out + at * kD, ws.max_splits * kD, dim0, static_cast<int>(real < 16 ? real : 16), staging,
                      lane.g, lane.t);
  }
  if constexpr (kLastCtaMerges)
    if (splits > 1 && ws.arrivals != nullptr) merge_if_last<kHeads, kThreads>(p, ws, work, head0, splits, scratch);
}

// The WGMMA kernel (64 heads a CTA, grid as sparse_attn_mma's: tokens x splits, head blocks; with
// cta_per_token, tokens x head blocks, a CTA running all of its token's splits; with whole_tiles
// too, over rows, sparse_attn_wgmma_ws's kernel).
void launch_sparse_attn_wgmma(dim3 grid, bool cta_per_token, bool whole_tiles, cudaStream_t stream,
                              const SparseAttnRowsParams& p, const SplitWorkspace& ws);

// sparse_attn_wgmma_ws's kernel (a CTA a token of the grid's x, head blocks its y, over rows, not
// packed entries).
void launch_sparse_attn_wgmma_ws(dim3 grid, cudaStream_t stream, const SparseAttnRowsParams& p,
                                 const SplitWorkspace& ws);

}  // namespace dsv4::kernels::sparse_attn_tc
