// mHC kernels (see mhc.h). Scalar steps follow CpuOps' cpu_mhc.cpp line by line; the _rn
// intrinsics keep nvcc from fusing the products and sums the CPU rounds separately.
#include "kernels/mhc/mhc.h"

#include "core/numeric.h"
#include "kernels/cp_async.cuh"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/rms_norm_scale.cuh"
#include "kernels/last_block.cuh"
#include "kernels/launch.cuh"
#include "kernels/per_device_once.h"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

__device__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

constexpr int kWarps = kThreads / 32;
constexpr int kTokensPerBlock = 4;

// Chunk `index` of kHcChunks equal chunks (the last one shorter) of a row `width` wide: [begin, end).
struct HcChunk {
  int64_t begin, end;
};
__device__ __forceinline__ HcChunk hc_chunk(int64_t width, int64_t index) {
  const int64_t chunk = (width + kHcChunks - 1) / kHcChunks;
  const int64_t begin = index * chunk;
  return {begin, begin + chunk < width ? begin + chunk : width};
}

// Block (token group, chunk, mix group): the dots of mixes [k0, k0 + kGroup) over the chunk, and
// in mix group 0 the sum of squares too. Each dot is accumulated by the same threads in the same
// order whatever the grouping (thread-strided FMAs, a warp's xor reduction, warps added in
// order), so the grouping is a launch choice that never changes a bit: small batches split the
// mixes over more blocks (decode: 16 chunks alone would leave most SMs idle); prefill batches take
// hc_mix_scan_kernel (below), which gives the same bits.
template <int kGroup, int kTokens = kTokensPerBlock>
__device__ __forceinline__ void mix_partials_block(const HcMixPartialsParams& p) {
  constexpr int kSums = kGroup + 1;  // the group's dots, then the sum of squares
  __shared__ float warp_sums[kWarps][kTokens][kSums];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const HcChunk range = hc_chunk(p.width, blockIdx.y);
  const int64_t begin = range.begin, end = range.end;
  const int64_t k0 = static_cast<int64_t>(blockIdx.z) * kGroup;
  const bool squares = blockIdx.z == 0;
  float acc[kTokens][kSums];
#pragma unroll
  for (auto& token_acc : acc)
#pragma unroll
    for (float& v : token_acc) v = 0.0f;
  // kDepth of the thread's positions at a time: their loads first, all in flight together (the
  // kernel waits on memory latency, not bandwidth), then their FMAs in ascending position order.
  constexpr int kDepth = kTokens * kGroup <= 8 ? 4 : 2;
  for (int64_t i0 = begin + threadIdx.x; i0 < end; i0 += kDepth * kThreads) {
    float x[kDepth][kTokens], f[kDepth][kGroup];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int64_t i = i0 + d * kThreads;
#pragma unroll
      for (int tt = 0; tt < kTokens; ++tt)
        x[d][tt] = i < end && t0 + tt < p.tokens ? load_float(p.x, (t0 + tt) * p.width + i) : 0.0f;
#pragma unroll
      for (int g = 0; g < kGroup; ++g) f[d][g] = i < end && k0 + g < p.mix ? load_float(p.fn, (k0 + g) * p.width + i) : 0.0f;
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (i0 + d * kThreads >= end) break;
#pragma unroll
      for (int tt = 0; tt < kTokens; ++tt)
        if (squares) acc[tt][kSums - 1] = fmaf(x[d][tt], x[d][tt], acc[tt][kSums - 1]);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (k0 + g >= p.mix) break;
#pragma unroll
        for (int tt = 0; tt < kTokens; ++tt) acc[tt][g] = fmaf(x[d][tt], f[d][g], acc[tt][g]);
      }
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt)
#pragma unroll
    for (int g = 0; g < kSums; ++g) {
      float v = acc[tt][g];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) warp_sums[warp][tt][g] = v;
    }
  __syncthreads();
  for (int e = threadIdx.x; e < kTokens * kSums; e += kThreads) {
    const int tt = e / kSums, g = e % kSums;
    const bool is_squares = g == kSums - 1;
    if (t0 + tt >= p.tokens || (is_squares ? !squares : k0 + g >= p.mix)) continue;
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w][tt][g];
    p.partials[((t0 + tt) * kHcChunks + blockIdx.y) * (p.mix + 1) + (is_squares ? p.mix : k0 + g)] = total;
  }
}

template <int kGroup>
__global__ void __launch_bounds__(kThreads) hc_mix_partials_kernel(HcMixPartialsParams p) {
  pdl_wait();
  mix_partials_block<kGroup>(p);
}

// The prefill form of hc_mix_partials_kernel: the same sums, each in the same order, computed
// so that no value crosses threads (the butterfly reductions above cost as much as the products
// once every thread holds 4 x 25 sums). There, position p = 32 w + l of a chunk (the elements
// begin + p + 256 j, j ascending) is one thread's serial FMA chain; lane 0 of warp w ends its
// butterfly with a fixed binary tree of the 32 positions (l and l + 16 paired first, then those
// sums 8 apart, then 4, 2, 1); the 8 warps' sums are added in order. Here a thread owns whole
// outputs: it takes warp group w's positions in bit-reversed order of l, so pushing each
// position's chain onto a stack of pending sums (a binary counter: position k of the walk merges
// once per trailing one bit of k) adds exactly the butterfly's pairs, then adds the groups in
// order. Addition commutes, so the bits are the grouped kernels'. A block takes kScanTokens
// tokens (two per lane) and one chunk; warp g owns sums [5g, 5g + 5) (sum `mix` is the squares),
// and the chunk comes through shared memory one warp group's 32 x J elements at a time: x's tile
// with lane l's two tokens side by side (one 8-byte load), each warp's weights with a position's
// five side by side (a 16-byte and a 4-byte broadcast load), so that a position's ten FMAs wait on
// three shared loads instead of seven (docs/PERF.md session 49).
constexpr int kScanTokens = 64;
constexpr int kScanTokensPerLane = kScanTokens / 32;
constexpr int kScanSumsPerWarp = 5;
constexpr int kScanLevels = 5;  // log2 of the 32 positions of a warp group
constexpr int kScanXRow = kScanTokens + 2;  // floats a position of x's tile: token l + 32 tt at 2 l + tt, 2 of padding
constexpr int kScanFSlot = 8;  // floats a position of a warp's weights: its five sums', padded to 32 bytes
static_assert(kScanTokensPerLane == 2 && kScanSumsPerWarp == 5, "hc_mix_scan's loads take 2 tokens and 5 sums");

// Where x's tile holds token r (of the block's kScanTokens) at position q.
__device__ __forceinline__ int scan_x_index(int q, int r) { return q * kScanXRow + 2 * (r % 32) + r / 32; }

// Loads `rows` rows of a warp group's tile, a row per warp at a time: lane l of row r reads
// src[row_start(r) + 32 w + l + 256 j] for j < kDeep (0 past the chunk's length or where row_start
// is -1; the kDeep loads in flight together) and store(r, q, value) puts it at tile index
// q = 32 j + l.
template <int kDeep, typename RowStart, typename Store>
__device__ __forceinline__ void scan_load_rows(FloatPtr src, int rows, int w, int64_t length, RowStart row_start,
                                               Store store) {
  const int warps = static_cast<int>(blockDim.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  for (int r = static_cast<int>(threadIdx.x / 32); r < rows; r += warps) {
    const int64_t start = row_start(r);
    float v[kDeep];
#pragma unroll
    for (int j = 0; j < kDeep; ++j) {
      const int64_t offset = 32 * w + lane + 256 * j;
      v[j] = start >= 0 && offset < length ? load_float(src, start + offset) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kDeep; ++j) store(r, 32 * j + lane, v[j]);
  }
}

// Warp g's weights of warp group w's tile: rows 5 g + s (s < 5) of fn at fw[q * kScanFSlot + s]
// (0 for the squares and past mix or the chunk's length), each lane its positions q = 32 j + l;
// only warp g reads them.
template <int kDeep>
__device__ __forceinline__ void scan_load_weights(FloatPtr fn, int64_t mix, int64_t width, int64_t begin, int w,
                                                  int64_t length, float* fw) {
  const int lane = static_cast<int>(threadIdx.x % 32), sum0 = static_cast<int>(threadIdx.x / 32) * kScanSumsPerWarp;
  float v[kDeep][kScanSumsPerWarp];
#pragma unroll
  for (int j = 0; j < kDeep; ++j)
#pragma unroll
    for (int s = 0; s < kScanSumsPerWarp; ++s) {
      const int64_t offset = 32 * w + lane + 256 * j;
      v[j][s] = sum0 + s < mix && offset < length ? load_float(fn, (sum0 + s) * width + begin + offset) : 0.0f;
    }
#pragma unroll
  for (int j = 0; j < kDeep; ++j) {
    float* slot = fw + (32 * j + lane) * kScanFSlot;
    *reinterpret_cast<float4*>(slot) = make_float4(v[j][0], v[j][1], v[j][2], v[j][3]);
    slot[4] = v[j][4];
  }
}

// Asks L2 for the 128-byte line holding `address` (the kernels below prefetch what no kernel
// writes, or what the scan loads next).
__device__ __forceinline__ void prefetch_l2_line(const void* address) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
}

// Asks L2 for the rows scan_load_rows will load for warp group w (one 32-element segment per row
// and j), so that the next group's loads, which the scan waits for, find them there: the kernel's
// loads from memory were a third of its stalls (ncu, docs/PERF.md session 28).
template <int kDeep, typename RowStart>
__device__ __forceinline__ void scan_prefetch_rows(FloatPtr src, int rows, int w, int64_t length, RowStart row_start) {
  const size_t element_bytes = src.bf16 ? 2 : 4;
  for (int at = static_cast<int>(threadIdx.x); at < rows * kDeep; at += static_cast<int>(blockDim.x)) {
    const int r = at / kDeep, j = at % kDeep;
    const int64_t start = row_start(r), offset = 32 * w + 256 * j;
    if (start < 0 || offset >= length) continue;
    prefetch_l2_line(static_cast<const char*>(src.data) + (start + offset) * element_bytes);
  }
}

__device__ __forceinline__ int bit_reversed_lane(int k) { return static_cast<int>(__brev(static_cast<unsigned>(k)) >> 27); }

// Which sums a warp of hc_mix_scan_kernel owns, so that the common cases carry no per-sum tests:
// five sums, the last of them a mix or (V4's last warp, and hc_head's one) the squares, or
// anything else. One code path serves both five-sum warps: the kernel's instruction fetch is one
// of its bounds (ncu, docs/PERF.md session 28), so two hot copies of the loop cost more than the
// select the squares take.
enum class ScanRole { kFiveSums, kAnySums };

// The walk's positions come kScanUnroll at a time (unrolled: the binary counter's lowest levels
// are known at compile time), the groups of them in a loop (their levels tested at run time), so
// that the loop's code stays small enough for the instruction cache.
constexpr int kScanUnroll = 8;
constexpr int kScanUnrollLevels = 3;  // log2(kScanUnroll)
static_assert(kScanUnroll == 1 << kScanUnrollLevels && 32 % kScanUnroll == 0);

// One warp group's part of a warp's sums (sums sum0.., fn's rows at fw; with kFiveSums,
// last_is_squares says whether sum0 + 4 is the squares): see hc_mix_scan_kernel. `length`, the
// chunk's, is 32-bit (chunks are at most a 16th of a row): each element's test against it was a
// 64-bit compare of five instructions beside its ten FMAs (SASS, docs/PERF.md session 49).
template <int kDeep, ScanRole kRole>
__device__ __forceinline__ void scan_warp_group(const float* xs, const float* fw, int sum0, int64_t mix,
                                                bool last_is_squares, int w, int length, int lane,
                                                float (&total)[kScanTokensPerLane][kScanSumsPerWarp]) {
  float pending[kScanLevels][kScanTokensPerLane][kScanSumsPerWarp];
#pragma unroll 1
  for (int group = 0; group < 32 / kScanUnroll; ++group) {
#pragma unroll
    for (int i = 0; i < kScanUnroll; ++i) {
      const int k = group * kScanUnroll + i;
      const int l = bit_reversed_lane(k);
      float chain[kScanTokensPerLane][kScanSumsPerWarp];
#pragma unroll
      for (auto& row : chain)
#pragma unroll
        for (float& v : row) v = 0.0f;
#pragma unroll
      for (int j = 0; j < kDeep; ++j) {
        if (32 * w + l + 256 * j >= length) break;
        const int q = 32 * j + l;
        const float2 xv = *reinterpret_cast<const float2*>(xs + scan_x_index(q, lane));
        const float x[kScanTokensPerLane] = {xv.x, xv.y};
        const float4 f4 = *reinterpret_cast<const float4*>(fw + q * kScanFSlot);
        const float fq[kScanSumsPerWarp] = {f4.x, f4.y, f4.z, f4.w, fw[q * kScanFSlot + 4]};
#pragma unroll
        for (int s = 0; s < kScanSumsPerWarp; ++s) {
          // The squares: the last sum where last_is_squares (kFiveSums), sum `mix` (kAnySums).
          const bool squares = kRole == ScanRole::kFiveSums ? s == kScanSumsPerWarp - 1 && last_is_squares
                                                            : sum0 + s == mix;
          if (kRole == ScanRole::kAnySums && sum0 + s > mix) break;
          const float f = squares ? 0.0f : fq[s];
#pragma unroll
          for (int tt = 0; tt < kScanTokensPerLane; ++tt)
            chain[tt][s] = fmaf(x[tt], squares ? x[tt] : f, chain[tt][s]);
        }
      }
      // Carry the chain up the binary counter: level d holds the pending sum of 2^d positions;
      // bit d of k is i's below kScanUnrollLevels (known here), the group's above.
      bool carrying = true;
#pragma unroll
      for (int d = 0; d < kScanLevels; ++d) {
        const int bit = d < kScanUnrollLevels ? (i >> d) & 1 : (group >> (d - kScanUnrollLevels)) & 1;
        if (!carrying) continue;
        if (bit == 0) {
#pragma unroll
          for (int tt = 0; tt < kScanTokensPerLane; ++tt)
#pragma unroll
            for (int s = 0; s < kScanSumsPerWarp; ++s) pending[d][tt][s] = chain[tt][s];
          carrying = false;
        } else {
#pragma unroll
          for (int tt = 0; tt < kScanTokensPerLane; ++tt)
#pragma unroll
            for (int s = 0; s < kScanSumsPerWarp; ++s) chain[tt][s] = pending[d][tt][s] + chain[tt][s];
        }
      }
      if (carrying)
#pragma unroll
        for (int tt = 0; tt < kScanTokensPerLane; ++tt)
#pragma unroll
          for (int s = 0; s < kScanSumsPerWarp; ++s) total[tt][s] += chain[tt][s];
    }
  }
}

template <int kDeep>  // elements per position: ceil(chunk / 256)
__global__ void __launch_bounds__(kThreads) hc_mix_scan_kernel(HcMixPartialsParams p) {
  pdl_wait();
  extern __shared__ float scan_smem[];
  constexpr int tile = 32 * kDeep;  // elements of one warp group: q = 32 j + l
  float* xs = scan_smem;                 // [tile][kScanXRow]: x of the block's tokens (scan_x_index)
  float* fs = scan_smem + tile * kScanXRow;  // [warps][tile][kScanFSlot]: each warp's weights
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kScanTokens;
  const HcChunk range = hc_chunk(p.width, blockIdx.y);
  const int64_t begin = range.begin, end = range.end;
  const int64_t length = end - begin;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int sum0 = warp * kScanSumsPerWarp;
  float total[kScanTokensPerLane][kScanSumsPerWarp];
#pragma unroll
  for (auto& row : total)
#pragma unroll
    for (float& v : row) v = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) {
    __syncthreads();  // the previous group's tiles are read
    // x's tile (lane l loads element 32 w + l + 256 j of each token's row), and each warp its weights.
    const auto x_row_start = [&](int r) { return t0 + r < p.tokens ? (t0 + r) * p.width + begin : int64_t{-1}; };
    scan_load_rows<kDeep>(p.x, kScanTokens, w, length, x_row_start,
                          [&](int r, int q, float v) { xs[scan_x_index(q, r)] = v; });
    float* fw = fs + warp * tile * kScanFSlot;
    scan_load_weights<kDeep>(p.fn, p.mix, p.width, begin, w, length, fw);
    __syncthreads();
    if (w + 1 < kThreads / 32) scan_prefetch_rows<kDeep>(p.x, kScanTokens, w + 1, length, x_row_start);
    if (sum0 + kScanSumsPerWarp - 1 <= p.mix)
      scan_warp_group<kDeep, ScanRole::kFiveSums>(xs, fw, sum0, p.mix, sum0 + kScanSumsPerWarp - 1 == p.mix, w,
                                                  static_cast<int>(length), lane, total);
    else
      scan_warp_group<kDeep, ScanRole::kAnySums>(xs, fw, sum0, p.mix, false, w, static_cast<int>(length), lane, total);
  }
#pragma unroll
  for (int tt = 0; tt < kScanTokensPerLane; ++tt) {
    const int64_t t = t0 + lane + 32 * tt;
    if (t >= p.tokens) continue;
#pragma unroll
    for (int s = 0; s < kScanSumsPerWarp; ++s)
      if (sum0 + s <= p.mix) p.partials[(t * kHcChunks + blockIdx.y) * (p.mix + 1) + sum0 + s] = total[tt][s];
  }
}

// Mix k of a token from its partials `part` ([kHcChunks, mix + 1], chunks added in order); every
// caller sums the squares in the same order, so all agree on the norm.
__device__ float finish_mix(const float* part, int64_t k, int64_t mix, int64_t width, float norm_eps) {
  float dot = 0.0f, ss = 0.0f;
  for (int c = 0; c < kHcChunks; ++c) {
    dot += part[c * (mix + 1) + k];
    ss += part[c * (mix + 1) + mix];
  }
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(width) + norm_eps);
  return __fmul_rn(dot, rs);
}

// Element (i, k) = lane i * n + k of a warp's n x n matrix: the sum of row i (from_row) or column
// k, added in index order from 0 as the CPU's loops add them. Every lane calls it. kN: n as a
// constant (0: the runtime n), so that the loops unroll and the lanes' sources are constants.
template <int kN>
__device__ float line_sum(float v, int runtime_n, bool from_row) {
  const int n = kN > 0 ? kN : runtime_n;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int i = lane / n, k = lane % n;
  float sum = 0.0f;
#pragma unroll 4  // n is 4 in V4: the shuffles issue together, the adds stay in order
  for (int e = 0; e < n; ++e) {
    const int src = from_row ? i * n + e : e * n + k;
    sum = __fadd_rn(sum, __shfl_sync(0xffffffffu, v, src < 32 ? src : 31));
  }
  return sum;
}

// The n x n Sinkhorn of MODEL.md §2.4, one element per lane of a warp (lanes >= n*n carry
// nothing), with every element seeing the CPU's sinkhorn() operations in its order: a row
// softmax plus eps, a column normalisation, then iters - 1 row and column normalisations. Called
// by a whole warp; returns the lane's element. kN as for line_sum.
template <int kN>
__device__ float warp_sinkhorn(float v, int runtime_n, int64_t iters, float eps) {
  const int n = kN > 0 ? kN : runtime_n;
  const int lane = static_cast<int>(threadIdx.x % 32), i = lane / n;
  float mx = __shfl_sync(0xffffffffu, v, i * n < 32 ? i * n : 31);
#pragma unroll 3
  for (int e = 1; e < n; ++e) mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, i * n + e < 32 ? i * n + e : 31));
  v = expf(__fsub_rn(v, mx));
  v = __fadd_rn(__fdiv_rn(v, line_sum<kN>(v, n, true)), eps);
  v = __fdiv_rn(v, __fadd_rn(line_sum<kN>(v, n, false), eps));
  for (int64_t it = 1; it < iters; ++it) {
    v = __fdiv_rn(v, __fadd_rn(line_sum<kN>(v, n, true), eps));
    v = __fdiv_rn(v, __fadd_rn(line_sum<kN>(v, n, false), eps));
  }
  return v;
}

// Column d of y's token t: sum_j g[j] * x[t, j, d], j ascending, each product and sum rounded
// to fp32 as the CPU rounds them.
__device__ __forceinline__ float weighted_column(const float* g, FloatPtr x, int64_t t, int64_t n, int64_t dim,
                                                 int64_t d) {
  float acc = __fmul_rn(g[0], load_float(x, t * n * dim + d));
  for (int64_t j = 1; j < n; ++j) acc = __fadd_rn(acc, __fmul_rn(g[j], load_float(x, (t * n + j) * dim + d)));
  return acc;
}

// weighted_column of 8 columns at once from their bf16 values: raw[j] holds stream j's 8 (j < n).
__device__ __forceinline__ void weighted_columns8(const float* g, const uint4 (&raw)[kHcMaxStreams], int64_t n,
                                                  float (&acc)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const auto element = [&](int j) {
      const uint32_t word = e / 2 == 0 ? raw[j].x : e / 2 == 1 ? raw[j].y : e / 2 == 2 ? raw[j].z : raw[j].w;
      return bf16_to_float(static_cast<uint16_t>(e % 2 == 0 ? word & 0xffffu : word >> 16));
    };
    acc[e] = __fmul_rn(g[0], element(0));
#pragma unroll
    for (int j = 1; j < kHcMaxStreams; ++j)
      if (j < n) acc[e] = __fadd_rn(acc[e], __fmul_rn(g[j], element(j)));
  }
}

// y[t, begin:end] = sum_j g[j] * x[t, j, begin:end], j ascending, rounded to y's type, by a
// block whose threads below n fill g (shared memory) in set_weights(), which every thread calls
// and which ends with __syncthreads. x's loads do not wait for the weights: with bf16 streams in
// whole 16-byte groups, thread i loads its 8 columns begin + 8 i .. of every stream first (the
// slice is at most 8 x the block's threads), so the loads are in flight while the weights are
// computed, and stores its 8 outputs at once; otherwise a thread a column, after the weights.
// Either way every output is the same operations in the same order.
template <typename SetWeights>
__device__ void weighted_stream_sum(const float* g, FloatPtr x, MutFloatPtr y, int64_t t, int64_t n, int64_t dim,
                                    int64_t begin, int64_t end, SetWeights&& set_weights) {
  const bool grouped = x.bf16 && dim % 8 == 0 && begin % 8 == 0 && end - begin <= 8 * int64_t{blockDim.x} &&
                       reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && reinterpret_cast<uintptr_t>(y.data) % 16 == 0;
  if (!grouped) {
    set_weights();
    for (int64_t d = begin + threadIdx.x; d < end; d += blockDim.x)
      store_float(y, t * dim + d, weighted_column(g, x, t, n, dim, d));
    return;
  }
  const int64_t d = begin + 8 * static_cast<int64_t>(threadIdx.x);
  const bool mine = d < end;  // end - d is then a multiple of 8 too
  const auto* xs = static_cast<const uint16_t*>(x.data) + t * n * dim + d;
  uint4 raw[kHcMaxStreams];
#pragma unroll
  for (int j = 0; j < kHcMaxStreams; ++j)
    if (mine && j < n) raw[j] = *reinterpret_cast<const uint4*>(xs + j * dim);
  set_weights();
  if (!mine) return;
  float acc[8];
  weighted_columns8(g, raw, n, acc);
  store_float8(y, t * dim + d, acc);
}

// The part of y one block of the finishing kernels writes.
// Every thread's 8 columns in one 16-byte load a stream (bf16 streams): slices of 1,024 kept half
// of a block's threads idle and ncu found an 8k prefill's hc_pre_finish at 49% of DRAM's rate, its
// blocks each waiting on a chain (the token's partials, pre) for 8 KB in flight (session 49).
constexpr int64_t kStreamSumSlice = 8 * kThreads;

// From this many tokens on (prefill sizes) hc_pre_finish runs the Sinkhorn on a slice's last warp
// and the post mix takes 8 columns a thread; decode batches keep the forms that shorten a launch's
// longest block (docs/PERF.md session 49).
constexpr int64_t kHcPrefillMinTokens = 256;

__device__ float affine(float m, float scale, float base) { return __fadd_rn(__fmul_rn(m, scale), base); }

// The partials of token t in hc_mix_partials' output.
__device__ const float* token_partials(const HcPreFinishParams& p, int64_t t) {
  return p.partials + t * kHcChunks * ((2 + p.n) * p.n + 1);
}

// The weights lane k of post_and_comb's warp reads: no kernel's output, so they can be loaded
// before the partials are known (hc_pre_fused does, so that their latency is not on its chain).
struct PostCombWeights {
  float post_scale = 0, post_base = 0, comb_scale = 0, comb_base = 0;
};

__device__ PostCombWeights post_comb_weights(const HcPreFinishParams& p) {
  const int64_t n = p.n, k = threadIdx.x % 32;
  PostCombWeights w;
  if (k < n) {
    w.post_scale = load_float(p.scale, 1);
    w.post_base = load_float(p.base, n + k);
  }
  if (k < n * n) {
    w.comb_scale = load_float(p.scale, 2);
    w.comb_base = load_float(p.base, 2 * n + k);
  }
  return w;
}

// post[t, :] and comb[t] of token t from its partials, on one warp (lane k: post k, comb element k).
__device__ void post_and_comb(const HcPreFinishParams& p, int64_t t, const float* part, const PostCombWeights& w) {
  const int64_t n = p.n, mix = (2 + n) * n, k = threadIdx.x % 32;
  if (k < n)
    p.post[t * n + k] = __fmul_rn(
        2.0f, sigmoid(affine(finish_mix(part, n + k, mix, n * p.dim, p.norm_eps), w.post_scale, w.post_base)));
  const bool element = k < n * n;
  const float c0 =
      element ? affine(finish_mix(part, 2 * n + k, mix, n * p.dim, p.norm_eps), w.comb_scale, w.comb_base) : 0.0f;
  // V4's n = 4 (MODEL.md §2) as a constant: the Sinkhorn is the longer of hc_pre_fused's two chains.
  const float c = n == 4 ? warp_sinkhorn<4>(c0, 4, p.sinkhorn_iters, p.hc_eps)
                         : warp_sinkhorn<0>(c0, static_cast<int>(n), p.sinkhorn_iters, p.hc_eps);
  if (element) p.comb[t * n * n + k] = c;
}

// pre[k] of a token from its partials and the weights scale[0] and base[k].
__device__ float pre_mix(const HcPreFinishParams& p, int64_t k, const float* part, float scale, float base) {
  const int64_t n = p.n, mix = (2 + n) * n;
  return __fadd_rn(sigmoid(affine(finish_mix(part, k, mix, n * p.dim, p.norm_eps), scale, base)), p.hc_eps);
}

// Block (t, s < slices): pre (every block computes it, the same way) and slice s of y; post and
// comb of token t (the Sinkhorn, its weights loaded first) on block (t, 0)'s last warp after its
// columns, or with comb_block on the first warp of a block (t, slices) of its own. Prefill batches
// take the first: blocks of their own (one busy warp of eight) made a fifth of the grid, and those
// blocks, dispatched before any slice, held the SMs with no loads in flight. Decode batches take
// the second: there the kernel lasts as long as its longest block, and one warp running a slice's
// columns and then the Sinkhorn would be that block.
__global__ void hc_pre_finish_kernel(HcPreFinishParams p, bool comb_block) {
  pdl_wait();
  __shared__ float pre[kHcMaxStreams];
  const int64_t t = blockIdx.x, n = p.n;
  const auto k = static_cast<int64_t>(threadIdx.x);
  if (comb_block && blockIdx.y == gridDim.y - 1) {
    if (k < 32) post_and_comb(p, t, token_partials(p, t), post_comb_weights(p));
    return;
  }
  const bool comb_warp = !comb_block && blockIdx.y == 0 && threadIdx.x >= blockDim.x - 32;
  PostCombWeights comb_weights;
  if (comb_warp) comb_weights = post_comb_weights(p);
  const int64_t begin = blockIdx.y * kStreamSumSlice;
  weighted_stream_sum(pre, p.x, p.y, t, n, p.dim, begin, begin + kStreamSumSlice < p.dim ? begin + kStreamSumSlice : p.dim,
                      [&] {
                        if (k < n) pre[k] = pre_mix(p, k, token_partials(p, t), load_float(p.scale, 0), load_float(p.base, k));
                        __syncthreads();
                      });
  if (comb_warp) post_and_comb(p, t, token_partials(p, t), comb_weights);
}

// Block (t, s): g of token t (every block computes it, the same way) and slice s of y.
__global__ void hc_head_finish_kernel(HcHeadFinishParams p) {
  pdl_wait();
  __shared__ float g[kHcMaxStreams];
  const int64_t t = blockIdx.x;
  const auto j = static_cast<int64_t>(threadIdx.x);
  const int64_t begin = blockIdx.y * kStreamSumSlice;
  weighted_stream_sum(g, p.x, p.y, t, p.n, p.dim, begin, begin + kStreamSumSlice < p.dim ? begin + kStreamSumSlice : p.dim,
                      [&] {
                        if (j < p.n) {
                          const float m = finish_mix(p.partials + t * kHcChunks * (p.n + 1), j, p.n, p.n * p.dim, p.norm_eps);
                          g[j] = __fadd_rn(sigmoid(affine(m, load_float(p.scale, 0), load_float(p.base, j))), p.hc_eps);
                        }
                        __syncthreads();
                      });
}

// Grid (column groups, tokens): thread g of token t reads x[t, :, d] once for its kVec columns d
// = kVec g .. kVec g + kVec - 1 and writes out[t, j, d] for every j, looping past the grid's tokens.
// kVec 8 (dim a multiple of 8, arrays 16-byte aligned) makes each access 16 bytes (bf16; fp32 two
// of them), kVec 4 (a multiple of 4, arrays aligned to 4 elements) one 16-byte (fp32) or 8-byte
// (bf16) access; every element sees the same operations either way. With bf16 streams kVec 8
// moves a prefill's 8 KB rows in half the accesses of kVec 4 (docs/PERF.md session 49).
constexpr int kPostMixThreads = 128;

template <int kVec>
__device__ __forceinline__ void load_columns(FloatPtr p, int64_t i, float (&v)[kVec]) {
  if constexpr (kVec == 8) {
    load_float8(p, i, v);
  } else if constexpr (kVec == 4) {
    if (p.bf16) {
      const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(p.data) + i);
      v[0] = bf16_to_float(raw.x & 0xffffu);
      v[1] = bf16_to_float(raw.x >> 16);
      v[2] = bf16_to_float(raw.y & 0xffffu);
      v[3] = bf16_to_float(raw.y >> 16);
    } else {
      const float4 raw = *reinterpret_cast<const float4*>(static_cast<const float*>(p.data) + i);
      v[0] = raw.x;
      v[1] = raw.y;
      v[2] = raw.z;
      v[3] = raw.w;
    }
  } else {
    v[0] = load_float(p, i);
  }
}

template <int kVec>
__device__ __forceinline__ void store_columns(MutFloatPtr p, int64_t i, const float (&v)[kVec]) {
  if constexpr (kVec == 8) {
    store_float8(p, i, v);
  } else if constexpr (kVec == 4) {
    if (p.bf16) {
      const uint32_t lo = float_to_bf16(v[0]) | static_cast<uint32_t>(float_to_bf16(v[1])) << 16;
      const uint32_t hi = float_to_bf16(v[2]) | static_cast<uint32_t>(float_to_bf16(v[3])) << 16;
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.data) + i) = make_uint2(lo, hi);
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(p.data) + i) = make_float4(v[0], v[1], v[2], v[3]);
    }
  } else {
    store_float(p, i, v[0]);
  }
}

template <int kVec>
__global__ void __launch_bounds__(kPostMixThreads) hc_post_mix_kernel(HcPostMixParams p) {
  pdl_wait();
  const int64_t d = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * kVec;
  if (d >= p.dim) return;
  for (int64_t t = blockIdx.y; t < p.tokens; t += gridDim.y) {
    float x[kHcMaxStreams][kVec];
#pragma unroll
    for (int i = 0; i < kHcMaxStreams; ++i) {
      if (i < p.n) {
        load_columns<kVec>(p.x, (t * p.n + i) * p.dim + d, x[i]);
      } else {
#pragma unroll
        for (float& v : x[i]) v = 0.0f;
      }
    }
    float a[kVec];
    load_columns<kVec>(p.a, t * p.dim + d, a);
    // The token's post and comb, loaded with x and a: read inside the loop below, after each j's
    // stores (which the compiler must assume may alias them), they cost a round trip a stream.
    float c[kHcMaxStreams][kHcMaxStreams], post_of[kHcMaxStreams];  // c[i][j]: comb[t, i, j]
#pragma unroll
    for (int i = 0; i < kHcMaxStreams; ++i)
#pragma unroll
      for (int j = 0; j < kHcMaxStreams; ++j) c[i][j] = i < p.n && j < p.n ? p.comb[(t * p.n + i) * p.n + j] : 0.0f;
#pragma unroll
    for (int j = 0; j < kHcMaxStreams; ++j) post_of[j] = j < p.n ? p.post[t * p.n + j] : 0.0f;
#pragma unroll
    for (int j = 0; j < kHcMaxStreams; ++j) {
      if (j >= p.n) break;
      const float post = post_of[j];
      float out[kVec];
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        float o = __fmul_rn(c[0][j], x[0][v]);
#pragma unroll
        for (int i = 1; i < kHcMaxStreams; ++i)
          if (i < p.n) o = __fadd_rn(o, __fmul_rn(c[i][j], x[i][v]));
        out[v] = __fadd_rn(__fmul_rn(post, a[v]), o);
      }
      store_columns<kVec>(p.out, (t * p.n + j) * p.dim + d, out);
    }
  }
}

// rms_norm_rows' order for a row of y (elementwise.h): virtual thread v of the norm's block adds
// the squares of elements v, v + threads, .. (FMAs in order); each virtual warp's butterfly; the
// virtual warps' sums in order. The y warps (the block's warps from 1 on, synchronised by barrier
// 1) take virtual warps in turn. Then y[t] = weight * (ys * inv) as rms_norm_rows has it.
constexpr int kFinishYThreads = kThreads - 32;

// `weight`: the norm's weight (p.y_norm, or its copy in shared memory that the calling thread's
// cp.async groups bring: each thread waits for its own before the block's barrier).
__device__ void norm_row_of_ys(const HcPreFusedParams& p, int64_t t, const float* ys, float* scratch, FloatPtr weight) {
  const HcPreFinishParams& f = p.finish;
  constexpr int y_threads = kFinishYThreads, y_warps = kFinishYThreads / 32;
  const int lane = static_cast<int>(threadIdx.x % 32), y_warp = static_cast<int>(threadIdx.x / 32) - 1;
  const int y_thread = static_cast<int>(threadIdx.x) - 32;
  const auto threads = static_cast<int>(rms_norm_block_threads(f.dim));
  for (int vw = y_warp; vw < threads / 32; vw += y_warps) {
    float ss = 0;
    for (int64_t i = vw * 32 + lane; i < f.dim; i += threads) ss = fmaf(ys[i], ys[i], ss);
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) scratch[vw] = ss;
  }
  cp_async_wait_all();
  asm volatile("bar.sync 1, %0;" ::"r"(y_threads) : "memory");
  float total = 0;
  for (int w = 0; w < threads / 32; ++w) total += scratch[w];
  const float inv = rms_norm_scale(total, f.dim, f.norm_eps);
  const auto normed = [&](int64_t d) {
    const float v = __fmul_rn(ys[d], inv);
    return weight.data ? __fmul_rn(load_float(weight, d), v) : v;
  };
  if (!f.y.bf16 || f.dim % 8 != 0) {
    for (int64_t d = y_thread; d < f.dim; d += y_threads) store_float(f.y, t * f.dim + d, normed(d));
    return;
  }
  for (int64_t g = y_thread; g < f.dim / 8; g += y_threads) {  // 8 elements, one 16-byte store
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = normed(8 * g + e);
    store_float8(MutFloatPtr{f.y.data, true}, t * f.dim + 8 * g, y);
  }
}

// ys[d] = sum_j pre[j] * x[t, j, d] (j ascending) rounded to y's type, as hc_pre_finish_kernel
// stores y, by the y threads. One block does all of a token's row, so the loads go out together:
// with bf16 streams and dim a multiple of 8, each thread loads kVecInFlight groups of 8 elements of
// every stream at once.
constexpr int kVecInFlight = 4;

__device__ void stream_sum_into(const HcPreFinishParams& f, int64_t t, const float* pre, float* ys, int y_thread,
                                int y_threads) {
  const auto finish = [&](float acc) { return f.y.bf16 ? round_bf16(acc) : acc; };
  if (!f.x.bf16 || f.dim % 8 != 0) {
    for (int64_t d = y_thread; d < f.dim; d += y_threads) ys[d] = finish(weighted_column(pre, f.x, t, f.n, f.dim, d));
    return;
  }
  const auto* x = static_cast<const uint16_t*>(f.x.data) + t * f.n * f.dim;
  const int64_t groups = f.dim / 8;
  for (int64_t g0 = y_thread; g0 < groups; g0 += int64_t{kVecInFlight} * y_threads) {
    uint4 raw[kVecInFlight][kHcMaxStreams];
#pragma unroll
    for (int v = 0; v < kVecInFlight; ++v)
#pragma unroll
      for (int j = 0; j < kHcMaxStreams; ++j) {
        const int64_t g = g0 + v * y_threads;
        raw[v][j] = g < groups && j < f.n ? *reinterpret_cast<const uint4*>(x + j * f.dim + 8 * g) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int v = 0; v < kVecInFlight; ++v) {
      const int64_t g = g0 + v * y_threads;
      if (g >= groups) break;
      float acc[8];
      weighted_columns8(pre, raw[v], f.n, acc);
#pragma unroll
      for (int e = 0; e < 8; ++e) ys[8 * g + e] = finish(acc[e]);
    }
  }
}

// The last block of token t's blocks: the token's partials come into shared memory (`part`, one
// load each, from L2: other blocks wrote them); warp 0 computes post and comb, the other warps pre,
// y (ys, rounded to y's type as hc_pre_finish stores it) and its norm.
// The weights come first: they are no kernel's output, so their loads (scale and base for both
// chains, the norm's weight copied into shared memory `staged_weight` by cp.async where the host
// found its rows fit that, else nullptr) go out before the partials' and arrive while the block
// waits for those (loaded where they were used, they added their latency to both chains: PERF.md
// session 24).
__device__ void finish_token(const HcPreFusedParams& p, int64_t t, float* ys, void* staged_weight, float* scratch,
                             float* pre, float* part) {
  const HcPreFinishParams& f = p.finish;
  const int y_thread = static_cast<int>(threadIdx.x) - 32;
  PostCombWeights comb_weights;
  float pre_scale = 0, pre_base = 0;
  if (threadIdx.x < 32) {
    comb_weights = post_comb_weights(f);
  } else if (y_thread < f.n) {
    pre_scale = load_float(f.scale, 0);
    pre_base = load_float(f.base, y_thread);
  }
  if (staged_weight != nullptr && y_thread >= 0)
    for (int64_t c = y_thread; c < f.dim * (p.y_norm.bf16 ? 2 : 4) / 16; c += kFinishYThreads)
      cp_async16(static_cast<char*>(staged_weight) + 16 * c, static_cast<const char*>(p.y_norm.data) + 16 * c);
  const int64_t token_floats = kHcChunks * ((2 + f.n) * f.n + 1);
  for (int64_t i = threadIdx.x; i < token_floats; i += blockDim.x) part[i] = __ldcg(token_partials(f, t) + i);
  __syncthreads();
  if (threadIdx.x < 32) {
    post_and_comb(f, t, part, comb_weights);
    return;
  }
  if (y_thread < f.n) pre[y_thread] = pre_mix(f, y_thread, part, pre_scale, pre_base);
  asm volatile("bar.sync 1, %0;" ::"r"(kFinishYThreads) : "memory");
  stream_sum_into(f, t, pre, ys, y_thread, kFinishYThreads);
  asm volatile("bar.sync 1, %0;" ::"r"(kFinishYThreads) : "memory");
  norm_row_of_ys(p, t, ys, scratch, staged_weight != nullptr ? FloatPtr{staged_weight, p.y_norm.bf16} : p.y_norm);
}

// Block (t, chunk, mix group), one token a block so that each token's last block finishes it alone.
template <int kGroup>
__global__ void __launch_bounds__(kThreads) hc_pre_fused_kernel(HcPreFusedParams p, bool stage_weight) {
  // The norm's weight is no kernel's output: the first blocks bring it into L2 for the last ones.
  const int64_t weight_lines = (p.finish.dim * (p.y_norm.bf16 ? 2 : 4) + 127) / 128;
  const int64_t line = (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * kThreads + threadIdx.x;
  if (p.y_norm.data != nullptr && blockIdx.x == 0 && line < weight_lines)
    prefetch_l2_line(static_cast<const char*>(p.y_norm.data) + 128 * line);
  // Its rows of fn are no kernel's output either: their chunk comes into L2 while the kernel
  // before it finishes (8.89 -> 8.79 ms a batch-1 step, docs/PERF.md session 19).
  {
    const HcMixPartialsParams& m = p.mix;
    const HcChunk range = hc_chunk(m.width, blockIdx.y);
    const int64_t begin = range.begin, end = range.end;
    const int64_t bytes = m.fn.bf16 ? 2 : 4, lines = ((end - begin) * bytes + 127) / 128;
    for (int g = 0; g < kGroup; ++g) {
      const int64_t row = static_cast<int64_t>(blockIdx.z) * kGroup + g;
      if (row < m.mix && threadIdx.x < lines)
        prefetch_l2_line(static_cast<const char*>(m.fn.data) + (row * m.width + begin) * bytes + 128 * threadIdx.x);
    }
  }
  pdl_wait();
  extern __shared__ float ys[];  // [dim], then (stage_weight) the norm's weight (finish_token)
  __shared__ float scratch[32], pre[kHcMaxStreams], part[kHcChunks * (kHcMaxMix + 1)];
  mix_partials_block<kGroup, 1>(p.mix);
  if (!last_block_to_arrive(p.done + blockIdx.x, gridDim.y * gridDim.z)) return;
  finish_token(p, blockIdx.x, ys, stage_weight ? ys + p.finish.dim : nullptr, scratch, pre, part);
  if (threadIdx.x == 0) p.done[blockIdx.x] = 0;  // for the next call
}

// hc_mix_partials over blocks of kGroup mixes.
template <int kGroup>
void launch_grouped(const HcMixPartialsParams& p, unsigned token_blocks, cudaStream_t stream) {
  const auto groups = static_cast<unsigned>((p.mix + kGroup - 1) / kGroup);
  launch_pdl(hc_mix_partials_kernel<kGroup>, dim3(token_blocks, kHcChunks, groups), kThreads, 0, stream, p);
}

// hc_mix_scan_kernel<kDeep> over blocks of kScanTokens tokens and one chunk, a warp per 5 sums.
template <int kDeep>
void launch_scan(const HcMixPartialsParams& p, cudaStream_t stream) {
  const auto warps = static_cast<unsigned>((p.mix + 1 + kScanSumsPerWarp - 1) / kScanSumsPerWarp);
  const size_t smem = static_cast<size_t>(32 * kDeep) * (kScanXRow + warps * kScanFSlot) * sizeof(float);
  if (smem > 48 * 1024) {  // V4: 54 KB, four blocks an SM in its largest carveout
    DSV4_CUDA_CHECK(
        cudaFuncSetAttribute(hc_mix_scan_kernel<kDeep>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(hc_mix_scan_kernel<kDeep>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
  }
  const auto blocks = static_cast<unsigned>((p.tokens + kScanTokens - 1) / kScanTokens);
  launch_pdl(hc_mix_scan_kernel<kDeep>, dim3(blocks, kHcChunks), 32 * warps, smem, stream, p);
}

// The scan's chunks take up to kScanMaxDeep elements per position: streams up to 32768 wide
// (V4-Pro's 4 x 7168 needs 7).
constexpr int kScanMaxDeep = 8;

template <int kDeep = 1>
void hc_mix_scan(const HcMixPartialsParams& p, int64_t deep, cudaStream_t stream) {
  if constexpr (kDeep > kScanMaxDeep) {
    throw UsageError("hc_mix_partials: streams " + std::to_string(p.width) + " wide; the prefill kernel takes at most " +
                     std::to_string(kHcChunks * kThreads * kScanMaxDeep));
  } else if (deep == kDeep) {
    launch_scan<kDeep>(p, stream);
  } else {
    hc_mix_scan<kDeep + 1>(p, deep, stream);
  }
}

}  // namespace

void hc_mix_partials(const HcMixPartialsParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.mix == 0) return;
  const auto blocks = static_cast<unsigned>((p.tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  // Up to 16 tokens (decode): two mixes per block; up to 256 (large decode batches): eight, x read
  // three times from L2 (all 24 per block hold 184 registers a thread, one block per SM: 69 us
  // a call at 64 tokens on the H200); more (prefill): hc_mix_scan_kernel, x read once.
  if (p.tokens <= 16) {
    launch_grouped<2>(p, blocks, stream);
  } else if (p.tokens <= 256) {
    launch_grouped<8>(p, blocks, stream);
  } else {
    hc_mix_scan(p, ((p.width + kHcChunks - 1) / kHcChunks + kThreads - 1) / kThreads, stream);
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_pre_finish(const HcPreFinishParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  if (p.n > kHcMaxStreams) throw UsageError("hc_pre_finish: " + std::to_string(p.n) + " streams, at most 4");
  const auto slices = static_cast<unsigned>((p.dim + kStreamSumSlice - 1) / kStreamSumSlice);
  const bool comb_block = p.tokens < kHcPrefillMinTokens;
  launch_pdl(hc_pre_finish_kernel, dim3(static_cast<unsigned>(p.tokens), slices + (comb_block ? 1 : 0)), kThreads, 0,
             stream, p, comb_block);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_pre_fused(const HcPreFusedParams& p, cudaStream_t stream) {
  const HcPreFinishParams& f = p.finish;
  if (f.tokens == 0) return;
  if (f.tokens > kHcPreFusedMaxTokens || f.dim > kHcPreFusedMaxDim || f.n > kHcMaxStreams || p.mix.mix > kHcMaxMix)
    throw UsageError("hc_pre_fused: " + std::to_string(f.tokens) + " tokens of " + std::to_string(f.n) + " x " +
                     std::to_string(f.dim) + " streams; it takes at most " + std::to_string(kHcPreFusedMaxTokens) +
                     " tokens, 4 streams, dim " + std::to_string(kHcPreFusedMaxDim));
  const auto groups = static_cast<unsigned>((p.mix.mix + 1) / 2);
  // ys, and the norm's weight as finish_token copies it (up to 64 KiB: fp32 weights of the widest rows).
  static PerDeviceOnce configured;
  once_per_device(configured, [] {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(hc_pre_fused_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kHcPreFusedMaxDim * 2 * sizeof(float))));
  });
  // The norm's weight is staged when its rows are whole 16-byte chunks from a 16-byte boundary
  // (and land 16-byte aligned after ys).
  const int64_t weight_bytes = f.dim * (p.y_norm.bf16 ? 2 : 4);
  const bool stage_weight = p.y_norm.data != nullptr && reinterpret_cast<uintptr_t>(p.y_norm.data) % 16 == 0 &&
                            weight_bytes % 16 == 0 && f.dim % 4 == 0;
  const size_t shared_bytes = static_cast<size_t>(f.dim) * sizeof(float) + (stage_weight ? weight_bytes : 0);
  launch_pdl(hc_pre_fused_kernel<2>, dim3(static_cast<unsigned>(f.tokens), kHcChunks, groups), kThreads, shared_bytes,
             stream, p, stage_weight);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_head_finish(const HcHeadFinishParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  if (p.n > kHcMaxStreams) throw UsageError("hc_head_finish: " + std::to_string(p.n) + " streams, at most 4");
  const auto slices = static_cast<unsigned>((p.dim + kStreamSumSlice - 1) / kStreamSumSlice);
  launch_pdl(hc_head_finish_kernel, dim3(static_cast<unsigned>(p.tokens), slices), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_post_mix(const HcPostMixParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.n == 0 || p.dim == 0) return;
  if (p.n > kHcMaxStreams) throw UsageError("hc_post_mix: " + std::to_string(p.n) + " streams, at most 4");
  const auto aligned = [](const void* ptr, bool bf16) { return reinterpret_cast<uintptr_t>(ptr) % (bf16 ? 8 : 16) == 0; };
  // 8 columns a thread from prefill sizes on: a decode step's token in half the threads was slower
  // (a batch-1 step +1.5%, docs/PERF.md session 49).
  const bool vec8 = p.tokens >= kHcPrefillMinTokens && p.dim % 8 == 0 && aligned16(p.x.data) && aligned16(p.a.data) &&
                    aligned16(p.out.data);
  const bool vec4 = p.dim % 4 == 0 && aligned(p.x.data, p.x.bf16) && aligned(p.a.data, p.a.bf16) &&
                    aligned(p.out.data, p.out.bf16);
  const int64_t columns_per_block = kPostMixThreads * (vec8 ? 8 : vec4 ? 4 : 1);
  const dim3 grid(static_cast<unsigned>((p.dim + columns_per_block - 1) / columns_per_block),
                  static_cast<unsigned>(p.tokens < 65535 ? p.tokens : 65535));
  if (vec8) launch_pdl(hc_post_mix_kernel<8>, grid, kPostMixThreads, 0, stream, p);
  else if (vec4) launch_pdl(hc_post_mix_kernel<4>, grid, kPostMixThreads, 0, stream, p);
  else launch_pdl(hc_post_mix_kernel<1>, grid, kPostMixThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
