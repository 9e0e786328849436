// Tensor-core sparse attention: one CTA per (token, block of 16 x Pairs heads, split of the entry
// tiles). The heads share every entry (K = V = the 512-d row, MQA), so the heads are the M
// dimension of mma.sync m16n8k16 (bf16 in, fp32 accumulators) and each entry is read once per CTA:
//   - 2 x Pairs warps; warp w owns heads 16*(w/2) .. +15 (its "pair" w/2) and half h = w%2. A
//     pair's arithmetic never involves another pair, so Pairs (4: 64 heads a CTA; 1 or 2 when the
//     launch has too few CTAs to fill the GPU, as at decode) changes no bit; launches of 64 heads a
//     CTA take sparse_attn_wgmma.cu's kernel, the same bits on warpgroup MMAs;
//   - per tile of 64 entries (double-buffered with cp.async): warp (pair, h) computes the scores
//     of its 16 heads against entries 32h .. 32h+31, the pair agrees on the running row maximum
//     through shared memory (named barrier of 64 threads), writes its probabilities as three bf16
//     terms, and then multiplies all 64 entries' probabilities into output dims
//     256h .. 256h+255 (32 accumulator tiles of 16x8 per warp);
//   - in a launch too small to fill the GPU (decode at small batches), the 512 output dims are
//     cut into Parts (2 or 4) parts, a CTA each (grid z): every part computes the same scores and
//     softmax, and warp h of part z the dims 512z/Parts + 256h/Parts onwards, so the value product,
//     three quarters of the MMAs, is spread over Parts times the SMs. Every output is the same
//     fp32 operations in the same order, so Parts changes no bit either;
//   - a token's entries are cut into splits of kTilesPerSplit tiles, a CTA each; a token with
//     several splits has each CTA store its unnormalised output with its row max and sum, and
//     sparse_attn_mma_combine merges them with the sink (the WGMMA kernel's last split of a token
//     does, the same arithmetic). The cut depends only on the token's own entry count, never on
//     the batch, so a token gets the same bits alone, in any batch, in a prefill chunk or at
//     decode (chunked prefill equals one-shot prefill).
//   - over packed FP8 entries (p.packed: kv/packed_entries.h) a tile's entries are copied as bytes
//     into a packed stage (sparse_attn_softmax.cuh) and unpacked into the one buffer of rows while
//     the next tile's bytes arrive; their values are the rows' (the QAT put them on the grid), so
//     the bits are too. Warps beside the pairs help copy and unpack (kCtaThreads).
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16, g = lane/4, t = lane%4): A regs a0..a3 hold
// (row g, cols 2t,2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B regs b0, b1 hold
// (k 2t,2t+1, col g), (k 2t+8,2t+9, col g); C holds (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
// ldmatrix.x4 gives lane the pair (row lane/4, cols 2t,2t+1) of each of four 8x8 matrices whose
// row addresses lanes 8j..8j+7 supply; with .trans, the pair (rows 2t,2t+1, col lane/4).
#include "kernels/attention/sparse_attn_mma.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/numeric.h"
#include "kernels/attention/sparse_attn_softmax.cuh"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/per_device_once.h"

namespace dsv4::kernels {
namespace {

using namespace sparse_attn_tc;

constexpr int kMaxPairs = 4;        // pairs of warps of a CTA: 64 heads (the MMA's M, 4 x 16)
constexpr int kRow = kD + 8;        // q / kv row stride in shared memory (bf16): 1040 bytes, so the
                                    // 8 rows one ldmatrix reads start 16 bytes apart (no conflicts)
constexpr int kPRow = kTile + 8;    // probability row stride (bf16): 144 bytes, same reason
constexpr int kChunksPerRow = kD / 8;  // 16-byte chunks of a 512-d bf16 row
// Scratch for the splits' partial outputs is bounded by launching the batch in groups of tokens.
constexpr size_t kWorkspaceCap = size_t{512} << 20;
// Launches of at least this many waves of CTAs merge the splits in the WGMMA kernel (measured on
// the H200, docs/PERF.md session 23: CSA decode at batch 64, 2.4 waves, is 9% slower so, an 8k
// prefill's CSA launches of 31 waves 3.5% faster).
constexpr int64_t kMergeInKernelWaves = 8;
// WGMMA launches of at least this many waves of tokens (a CTA a token's head block) run a token's
// splits in one CTA (SparseAttnMmaPlan::Splits::kCtaPerToken; an 8k prefill's HCA launches 9%
// faster so, its CSA launches 1%: docs/PERF.md session 27).
constexpr int64_t kCtaPerTokenWaves = 4;
// The fewest splits a token (the launch's most) for which a CTA-a-token launch takes whole tiles a
// warpgroup (SparseAttnMmaPlan::whole_tiles). H100, an 8k prefill's launches (docs/PERF.md session
// 59): CSA (5 splits) 5,870 -> 5,516 us, HCA (2) 2,184 -> 2,241 us, whose few tiles a token do not
// pay for the doubled scores.
constexpr int kWholeTilesMinSplits = 3;

// Packed: one buffer of rows, refilled from the packed tile once the previous tile is consumed
// (the next tile's copy runs while the current one computes); rows: two, filled by cp.async.
template <int Pairs, bool Packed>
struct Smem {
  static constexpr int kHeads = 16 * Pairs;
  uint16_t q[kHeads * kRow];
  uint16_t kv[Packed ? 1 : 2][kTile * kRow];
  uint16_t p_hi[kHeads * kPRow];   // probabilities p = hi + mid + lo, each bf16: the 24 bits of
  uint16_t p_mid[kHeads * kPRow];  // p's fp32 significand, so p enters the value product exactly
  uint16_t p_lo[kHeads * kPRow];
  float max_part[2][kHeads];  // per half: the tile's row maxima
  float sum_part[2][kHeads];  // per half: the final row sums
  // Where each entry of the CTA's split reads its 512-d row (nullptr: the entry does not exist),
  // found once per CTA: finding it takes dependent global loads (the top-k id, the block table),
  // which the tile copies would otherwise wait for entry by entry.
  const uint16_t* row_of[kTilesPerSplit * kTile];
  std::conditional_t<Packed, PackedStage<1>, NoPackedStage> packed;  // last: the empty one takes a byte
};

// Hopper's opt-in shared memory a block (227 KB).
constexpr size_t kMaxSmemBytes = 232448;
static_assert(sizeof(Smem<kMaxPairs, false>) <= kMaxSmemBytes && sizeof(Smem<kMaxPairs, true>) <= kMaxSmemBytes,
              "sparse_attn_mma: a CTA's shared memory exceeds the device's");

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c += a * b over one m16n8k16 tile, bf16 operands, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Threads of a CTA: its pairs of warps, and with packed entries warps that only copy and unpack
// tiles beside them up to 256 threads, so that a tile's unpacking is spread as wide as the WGMMA
// kernel's (with one pair, a CTA of decode, 64 threads would unpack its 32K values alone).
template <int Pairs, bool Packed>
constexpr int kCtaThreads = Packed && 64 * Pairs < 256 ? 256 : 64 * Pairs;

template <int Pairs, int Parts, bool Packed>
__global__ void __launch_bounds__(kCtaThreads<Pairs, Packed>, 1)
    sparse_attn_mma_kernel(SparseAttnRowsParams p, SplitWorkspace ws) {
  constexpr int kHeads = 16 * Pairs, kThreads = kCtaThreads<Pairs, Packed>, kComputeThreads = 64 * Pairs;
  constexpr int kPartDims = kD / Parts, kHalfDims = kPartDims / 2;  // output dims of the CTA, of a warp
  pdl_wait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<Pairs, Packed>& sm = *reinterpret_cast<Smem<Pairs, Packed>*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int pair = warp / 2, half = warp % 2;
  const int g = lane / 4, t = lane % 4;
  const bool computes = tid < kComputeThreads;  // else a warp that only copies and unpacks
  const CtaWork work = cta_work(ws);
  const int64_t i = work.token;  // the batch token
  const int64_t head0 = static_cast<int64_t>(blockIdx.y) * kHeads;
  const TokenSplits ts = token_splits(p, i);
  const int64_t splits = ts.splits;
  if (work.split >= splits) return;  // the whole CTA: this token has fewer splits than the batch's most
  const int64_t tile_begin = work.split * kTilesPerSplit, tile_end = split_tile_end(ts.entries, tile_begin);

  // The 64 heads' queries (zeros past the last head), in the first cp.async group with tile 0.
  const auto* q = static_cast<const uint16_t*>(p.q.data);
  for (int c = tid; c < kHeads * kChunksPerRow; c += kThreads) {
    const int h = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    uint16_t* dst = sm.q + h * kRow + col;
    if (head0 + h < p.heads) cp_async16(dst, q + (i * p.heads + head0 + h) * kD + col);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
  if constexpr (Packed) find_entry_rows<kThreads, true>(p, ts, i, tile_begin, tid, sm.row_of, sm.packed.scales_of[0]);
  else find_entry_rows<kThreads>(p, ts, i, tile_begin, tid, sm.row_of);
  __syncthreads();
  // Thread tid copies chunk tid%64 of entries tid/64, tid/64 + 4, ...; missing entries are zeros
  // (their probabilities are 0, and 0 * 0 keeps the output finite). Packed: the tile's entries
  // into the packed stage, unpacked into the one buffer of rows by unpack_tile.
  auto load_tile = [&](int64_t tile, int buf) {
    const int64_t first = (tile - tile_begin) * kTile;
    if constexpr (Packed) {
      copy_packed_tile<kThreads>(sm.row_of + first, sm.packed.scales_of[0] + first, sm.packed.tile, tid);
    } else {
      const int col = (tid % kChunksPerRow) * 8;
      for (int e = tid / kChunksPerRow; e < kTile; e += kThreads / kChunksPerRow) {
        const uint16_t* row = sm.row_of[first + e];
        uint16_t* dst = sm.kv[buf] + e * kRow + col;
        if (row != nullptr) cp_async16(dst, row + col);
        else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  float o[kOutputs / Parts];
#pragma unroll
  for (float& v : o) v = 0.0f;
  const int dim0 = static_cast<int>(blockIdx.z) * kPartDims + half * kHalfDims;  // the warp's first output dim
  SoftmaxLane sl{pair, half, g, t, pair * 16 + g};

  if (tile_begin < tile_end) load_tile(tile_begin, 0);
  cp_async_commit();
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int buf = Packed ? 0 : static_cast<int>((tile - tile_begin) & 1);
    if constexpr (Packed) {
      cp_async_wait<0>();  // this tile's packed entries (and the queries) have landed
      __syncthreads();
      unpack_tile<kThreads>(sm.packed.tile, tid,
                            [&](int e, int c) { return sm.kv[0] + e * kRow + c * 8; });
      __syncthreads();  // the rows are whole and the packed stage free for the next tile
      if (tile + 1 < tile_end) load_tile(tile + 1, 0);
      cp_async_commit();
    } else {
      if (tile + 1 < tile_end) load_tile(tile + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();  // all but the newest group (the next tile) have landed
      __syncthreads();
    }
    // The compute warps' tile; every warp then meets at one barrier (the copy-only warps reached
    // another __syncthreads before, which compute-sanitizer's synccheck reports as divergent).
    if (computes) {
      const uint16_t* kv = sm.kv[buf];

      // Scores of heads row0 (+8) against entries 32*half + 8j + 2t (+1).
      float s[kScores];
#pragma unroll
      for (float& v : s) v = 0.0f;
#pragma unroll 2
      for (int k0 = 0; k0 < kD; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, sm.q + (pair * 16 + lane % 16) * kRow + k0 + (lane / 16) * 8);
#pragma unroll
        for (int nn = 0; nn < 2; ++nn) {
          // Matrices: entries +0..7 at k0 (b0 of n-tile 2nn), +0..7 at k0+8 (its b1), +8..15 at
          // k0 (b0 of n-tile 2nn+1), +8..15 at k0+8 (its b1).
          uint32_t b[4];
          const int entry = half * 32 + nn * 16 + lane % 8 + (lane / 16) * 8;
          ldmatrix_x4(b, kv + entry * kRow + k0 + ((lane / 8) % 2) * 8);
          mma_bf16(s + 8 * nn, a, b[0], b[1]);
          mma_bf16(s + 8 * nn + 4, a, b[2], b[3]);
        }
      }
      float correction[2];
      softmax_tile<kHeads>(s, sl, sm.row_of + (tile - tile_begin) * kTile, p.softmax_scale, sm.max_part, correction,
                           [&](int j, int r, uint32_t lo, uint32_t mid, uint32_t hi) {
                             const int at = (sl.row0 + 8 * r) * kPRow + sl.half * 32 + 8 * j + 2 * sl.t;
                             *reinterpret_cast<uint32_t*>(sm.p_lo + at) = lo;
                             *reinterpret_cast<uint32_t*>(sm.p_mid + at) = mid;
                             *reinterpret_cast<uint32_t*>(sm.p_hi + at) = hi;
                           });
      pair_barrier(pair);
      rescale_outputs(o, correction);
#pragma unroll 1
      for (int k0 = 0; k0 < kTile; k0 += 16) {
        uint32_t a_hi[4], a_mid[4], a_lo[4];
        const int a_at = (pair * 16 + lane % 16) * kPRow + k0 + (lane / 16) * 8;
        ldmatrix_x4(a_hi, sm.p_hi + a_at);
        ldmatrix_x4(a_mid, sm.p_mid + a_at);
        ldmatrix_x4(a_lo, sm.p_lo + a_at);
#pragma unroll
        for (int nn = 0; nn < kHalfDims / 16; ++nn) {
          // Transposed matrices: entries k0+0..7 at dims +0..7 (b0 of n-tile 2nn), k0+8..15 at
          // +0..7 (its b1), k0+0..7 at +8..15 (b0 of n-tile 2nn+1), k0+8..15 at +8..15 (its b1).
          uint32_t b[4];
          const int entry = k0 + lane % 8 + ((lane / 8) % 2) * 8;
          const int dim = dim0 + nn * 16 + (lane / 16) * 8;
          ldmatrix_x4_trans(b, kv + entry * kRow + dim);
          // Smallest term first, so the larger ones are added last.
          float* o_even = o + 8 * nn;
          float* o_odd = o + 8 * nn + 4;
          mma_bf16(o_even, a_lo, b[0], b[1]);
          mma_bf16(o_even, a_mid, b[0], b[1]);
          mma_bf16(o_even, a_hi, b[0], b[1]);
          mma_bf16(o_odd, a_lo, b[2], b[3]);
          mma_bf16(o_odd, a_mid, b[2], b[3]);
          mma_bf16(o_odd, a_hi, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // this buffer is consumed before the next iteration refills it
  }
  if (!computes) return;
  finish_split<kHeads, kComputeThreads>(p, ws, work, head0, splits, sl, o, dim0, blockIdx.z == 0, sm.sum_part,
                                        reinterpret_cast<float*>(sm.kv[0]));
}

constexpr int kCombineThreads = kD / 4;

// One CTA per (token, head) of the launch: merges a token's splits' partial softmaxes and adds
// the sink (a token of one split was finished by the main kernel).
__global__ void __launch_bounds__(kCombineThreads)
    sparse_attn_mma_combine(SparseAttnRowsParams p, SplitWorkspace ws) {
  pdl_wait();
  const int64_t i = ws.token0 + blockIdx.x;
  const int64_t splits = split_count(entry_count(p, p.positions[i]));
  if (splits == 1) return;
  const int64_t at = (static_cast<int64_t>(blockIdx.x) * p.heads + blockIdx.y) * ws.max_splits;
  const float2* ms = ws.max_sum + at;
  float m = -INFINITY;
  for (int64_t z = 0; z < splits; ++z) m = fmaxf(m, ms[z].x);
  auto* out = static_cast<uint16_t*>(p.out.data) + (i * p.heads + blockIdx.y) * kD + threadIdx.x * 4;
  if (m == -INFINITY) {
    *reinterpret_cast<uint2*>(out) = make_uint2(0, 0);
    return;
  }
  float den = expf(load_float(p.sink, blockIdx.y) - m);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t z = 0; z < splits; ++z) {
    const float w = expf(ms[z].x - m);  // 0 for a split without valid entries (max -inf)
    den += ms[z].y * w;
    const float4 v = *reinterpret_cast<const float4*>(ws.out + (at + z) * kD + threadIdx.x * 4);
    acc[0] += v.x * w;
    acc[1] += v.y * w;
    acc[2] += v.z * w;
    acc[3] += v.w * w;
  }
  *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16(float_to_bf16(acc[0] / den), float_to_bf16(acc[1] / den)),
                                              pack_bf16(float_to_bf16(acc[2] / den), float_to_bf16(acc[3] / den)));
}

}  // namespace

SparseAttnMmaPlan sparse_attn_mma_plan(int64_t tokens, int64_t heads, int64_t max_entries, int sm_count) {
  SparseAttnMmaPlan plan;
  const int64_t tiles = (max_entries + kTile - 1) / kTile;
  plan.max_splits = static_cast<int>(std::max<int64_t>(1, (tiles + kTilesPerSplit - 1) / kTilesPerSplit));
  // The fewest heads a CTA (so the most CTAs) for which the launch still fits one wave.
  const int64_t token_splits = std::max<int64_t>(tokens, 1) * plan.max_splits;
  plan.pairs = kMaxPairs;
  for (int pairs = 1; pairs < kMaxPairs; pairs *= 2) {
    const int64_t ctas = token_splits * ((heads + 16 * pairs - 1) / (16 * pairs));
    if (ctas <= sm_count) {
      plan.pairs = pairs;
      // And the most dim parts that still fit one wave.
      for (int parts = 4; parts > 1; parts /= 2)
        if (ctas * parts <= sm_count) {
          plan.dim_parts = parts;
          break;
        }
      break;
    }
  }
  plan.tokens_per_launch = std::max<int64_t>(tokens, 1);
  if (plan.max_splits == 1) return plan;
  // Partial rows and (max, sum) pairs of every head's splits, and an arrival count per block of
  // heads (as many as 16 heads a CTA make).
  const size_t per_token = static_cast<size_t>(heads * plan.max_splits) * (kD * sizeof(float) + sizeof(float2)) +
                           static_cast<size_t>((heads + 15) / 16) * sizeof(unsigned);
  plan.tokens_per_launch = std::clamp<int64_t>(static_cast<int64_t>(kWorkspaceCap / per_token), 1, plan.tokens_per_launch);
  const int64_t head_blocks = (heads + 63) / 64;
  if (plan.pairs == kMaxPairs && plan.max_splits <= kMaxMergedSplits) {
    if (plan.tokens_per_launch * head_blocks >= kCtaPerTokenWaves * sm_count) {
      plan.splits = SparseAttnMmaPlan::Splits::kCtaPerToken;
      plan.whole_tiles = plan.max_splits >= kWholeTilesMinSplits;
      // Whole waves a launch where the scratch bounds it, so no launch but the last ends in a
      // part-filled wave.
      if (plan.tokens_per_launch < tokens)
        plan.tokens_per_launch = plan.tokens_per_launch * head_blocks / sm_count * sm_count / head_blocks;
    } else if (plan.tokens_per_launch * plan.max_splits * head_blocks >= kMergeInKernelWaves * sm_count) {
      plan.splits = SparseAttnMmaPlan::Splits::kLastCtaMerges;
    }
  }
  plan.workspace_bytes = static_cast<size_t>(plan.tokens_per_launch) * per_token;
  return plan;
}

namespace {

// The main kernel of `Pairs` pairs of warps a CTA and `Parts` dim parts (grid z), for rows or
// packed entries (p.packed), its shared memory attribute set once per device.
template <int Pairs, int Parts, bool Packed>
void launch_sparse_attn_mma_for(dim3 grid, cudaStream_t stream, const SparseAttnRowsParams& p, const SplitWorkspace& ws) {
  static PerDeviceOnce configured;
  once_per_device(configured, [] {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_mma_kernel<Pairs, Parts, Packed>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(sizeof(Smem<Pairs, Packed>))));
  });
  grid.z = Parts;
  launch_pdl(sparse_attn_mma_kernel<Pairs, Parts, Packed>, grid, kCtaThreads<Pairs, Packed>, sizeof(Smem<Pairs, Packed>),
             stream, p, ws);
}

template <int Pairs, int Parts>
void launch_sparse_attn_mma(dim3 grid, cudaStream_t stream, const SparseAttnRowsParams& p, const SplitWorkspace& ws) {
  if (p.packed) launch_sparse_attn_mma_for<Pairs, Parts, true>(grid, stream, p, ws);
  else launch_sparse_attn_mma_for<Pairs, Parts, false>(grid, stream, p, ws);
}

// The kernel of `Pairs` pairs of warps with the plan's dim parts.
template <int Pairs>
void launch_sparse_attn_mma_parts(int dim_parts, dim3 grid, cudaStream_t stream, const SparseAttnRowsParams& p,
                                  const SplitWorkspace& ws) {
  switch (dim_parts) {
    case 1: launch_sparse_attn_mma<Pairs, 1>(grid, stream, p, ws); break;
    case 2: launch_sparse_attn_mma<Pairs, 2>(grid, stream, p, ws); break;
    default: launch_sparse_attn_mma<Pairs, 4>(grid, stream, p, ws); break;
  }
}

}  // namespace

bool sparse_attn_mma_takes_wgmma(const SparseAttnMmaPlan& plan) { return plan.pairs == kMaxPairs && plan.wgmma; }

void sparse_attn_mma(const SparseAttnRowsParams& p, const SparseAttnMmaPlan& plan, void* workspace,
                     cudaStream_t stream) {
  if (p.tokens <= 0 || p.heads <= 0) return;
  if (plan.pairs != 1 && plan.pairs != 2 && plan.pairs != kMaxPairs)
    throw UsageError("sparse_attn_mma: plan.pairs=" + std::to_string(plan.pairs) + ", expected 1, 2 or 4");
  if (plan.dim_parts != 1 && (plan.pairs == kMaxPairs || (plan.dim_parts != 2 && plan.dim_parts != 4)))
    throw UsageError("sparse_attn_mma: plan.dim_parts=" + std::to_string(plan.dim_parts) +
                     ", expected 1, or 2 or 4 with plan.pairs 1 or 2 (pairs=" + std::to_string(plan.pairs) + ")");
  SplitWorkspace ws;
  ws.max_splits = plan.max_splits;
  const int64_t heads_per_cta = 16 * plan.pairs;
  const auto head_blocks = static_cast<unsigned>((p.heads + heads_per_cta - 1) / heads_per_cta);
  using Splits = SparseAttnMmaPlan::Splits;
  const bool wgmma = sparse_attn_mma_takes_wgmma(plan);
  // The WGMMA kernel's own merges take at most kMaxMergedSplits splits; other launches merge by kernel.
  const Splits splits = wgmma && plan.max_splits <= kMaxMergedSplits ? plan.splits : Splits::kMergeKernel;
  if (plan.max_splits > 1) {
    ws.out = static_cast<float*>(workspace);
    ws.max_sum = reinterpret_cast<float2*>(ws.out + plan.tokens_per_launch * p.heads * plan.max_splits * kD);
    if (splits == Splits::kLastCtaMerges)
      ws.arrivals = reinterpret_cast<unsigned*>(ws.max_sum + plan.tokens_per_launch * p.heads * plan.max_splits);
  }
  for (ws.token0 = 0; ws.token0 < p.tokens; ws.token0 += plan.tokens_per_launch) {
    const int64_t tokens = std::min(plan.tokens_per_launch, p.tokens - ws.token0);
    if (ws.arrivals != nullptr)
      DSV4_CUDA_CHECK(
          cudaMemsetAsync(ws.arrivals, 0, static_cast<size_t>(tokens) * head_blocks * sizeof(unsigned), stream));
    const int64_t ctas_a_token = splits == Splits::kCtaPerToken ? 1 : plan.max_splits;
    const dim3 grid(static_cast<unsigned>(tokens * ctas_a_token), head_blocks);
    switch (plan.pairs) {
      case 1: launch_sparse_attn_mma_parts<1>(plan.dim_parts, grid, stream, p, ws); break;
      case 2: launch_sparse_attn_mma_parts<2>(plan.dim_parts, grid, stream, p, ws); break;
      default:
        if (wgmma) launch_sparse_attn_wgmma(grid, splits == Splits::kCtaPerToken, plan.whole_tiles, stream, p, ws);
        else launch_sparse_attn_mma<kMaxPairs, 1>(grid, stream, p, ws);
        break;
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
    if (plan.max_splits == 1 || splits != Splits::kMergeKernel) continue;
    launch_pdl(sparse_attn_mma_combine, dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(p.heads)),
               kCombineThreads, 0, stream, p, ws);
    DSV4_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace dsv4::kernels
