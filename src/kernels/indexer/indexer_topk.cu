// Scores, exact kernel: one thread per (token, entry), the token's queries in shared memory; each
// q.k dot uses CpuOps' order (8 running partial sums combined pairwise) and the head sum runs in
// head order, all without contraction, so the scores equal the CPU's bit for bit. (The
// tensor-core kernel is indexer_mma_scores.cu.) Top-k: one CTA per token, or a cluster of them
// for a long decode row, finds the k-th largest score by a radix select on order-preserving keys,
// up to 11 bits a pass from the highest bit in which the row's keys differ, then writes the
// chosen ids in ascending order from one block scan (equal keys: the lowest ids win).
#include "kernels/indexer/indexer_topk.h"

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/indexer/indexer_mma_scores.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kScoreThreads = 128;
constexpr int kTopkThreads = 512;
// Radix passes of up to 11 bits (2,048 bins, four a thread): three cover any 32-bit key.
constexpr int kDigitBits = 11;
constexpr int kRadixBins = 1 << kDigitBits;
constexpr int kBinsPerThread = kRadixBins / kTopkThreads;
static_assert(kBinsPerThread == 4, "a thread's bins are one int4");
// A thread's first keys, kept in registers from one read of the scores: rows of up to 2,560
// visible entries (10k tokens at ratio 4) are read once, not once per radix pass and twice more.
// Five keep the kernel within 64 registers, two blocks an SM (eight held 71, one block an SM, and
// took an 8k prefill's top-k from 162 to 226 us, docs/PERF.md session 30; six spilled once the
// passes took 11 bits).
constexpr int kRegisterKeys = 5;
constexpr int kClusterRegisterKeys = 4;
// Rows longer than one CTA's registers hold are split over a cluster of up to 8 CTAs, as many as
// hold the row in registers, where the batch leaves SMs idle (decode batches): at most
// kTopkClusterMaxBlocks blocks, an H100's or H200's 132 SMs rounded down to a power of two. On an
// H100 (bench_indexer, docs/PERF.md session 58) 8,192 keys took 12.1 us on one CTA, 7.5 on four;
// 16,384 31.6 on one, 13.0 on eight; a batch of 64 of them 35.2 on one CTA each, 27.1 on two.
constexpr int64_t kTopkOneCtaKeys = int64_t{kRegisterKeys} * kTopkThreads;
constexpr int64_t kTopkClusterCtaKeys = int64_t{kClusterRegisterKeys} * kTopkThreads;
constexpr int64_t kTopkClusterMaxBlocks = 128;

__device__ float dot8(const float* a, FloatPtr b, int64_t b_off, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i + j], load_float(b, b_off + i + j)));
  for (int j = 0; i < n; ++i, ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i], load_float(b, b_off + i)));
  return __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])),
                   __fadd_rn(__fadd_rn(acc[4], acc[5]), __fadd_rn(acc[6], acc[7])));
}

__global__ void exact_score_kernel(IndexerTopkParams p) {
  pdl_wait();
  extern __shared__ float smem[];
  float* q_s = smem;                  // [heads, dh]
  float* w_s = q_s + p.heads * p.dh;  // [heads] w * weight_scale
  const int64_t i = blockIdx.x;       // token of the batch
  const IndexerSeqDesc seq = p.seqs[p.seq_of_token[i]];
  const int64_t visible = (p.positions[i] + 1) / p.ratio;
  if (blockIdx.y * static_cast<int64_t>(kScoreThreads) >= visible) return;  // the whole CTA
  for (int64_t x = threadIdx.x; x < p.heads * p.dh; x += blockDim.x) q_s[x] = load_float(p.q, i * p.heads * p.dh + x);
  for (int64_t h = threadIdx.x; h < p.heads; h += blockDim.x)
    w_s[h] = __fmul_rn(load_float(p.weights, i * p.heads + h), p.weight_scale);
  __syncthreads();
  const int64_t j = blockIdx.y * static_cast<int64_t>(kScoreThreads) + threadIdx.x;
  if (j >= visible) return;
  const int64_t row = pool_row(seq.key_pages, j);
  float acc = 0.0f;
  if (row >= 0)
    for (int64_t h = 0; h < p.heads; ++h)
      acc = __fadd_rn(acc, __fmul_rn(w_s[h], fmaxf(dot8(q_s + h * p.dh, seq.keys, row * p.dh, p.dh), 0.0f)));
  p.scores[i * p.score_stride + j] = row < 0 || isnan(acc) ? -INFINITY : acc;
}

// Unsigned keys in the order of the floats (-0 counted as +0, as the CPU's comparisons do).
__device__ uint32_t order_key(float f) {
  const uint32_t u = float_bits(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// A barrier over the token's CTAs: the cluster's (its shared memory writes then visible to every
// CTA of it) or, for one CTA, the block's.
template <int kCtas>
__device__ __forceinline__ void cluster_barrier() {
  if constexpr (kCtas > 1) {
    cg::this_cluster().sync();
  } else {
    __syncthreads();
  }
}

// `local`'s counterpart in the shared memory of the cluster's CTA `rank` (itself for one CTA).
template <int kCtas, typename T>
__device__ __forceinline__ T* cluster_shared(T* local, int rank) {
  if constexpr (kCtas > 1) {
    return cg::this_cluster().map_shared_rank(local, rank);
  } else {
    return local;
  }
}

using CountScan = cub::BlockScan<int, kTopkThreads>;
using PairScan = cub::BlockScan<unsigned long long, kTopkThreads>;

// A top-k CTA's shared memory.
struct TopkShared {
  union {
    typename CountScan::TempStorage count;
    typename PairScan::TempStorage pair;
  } scan;
  // Two, used in turn by the passes: a CTA clears one while the cluster may still read the other.
  alignas(16) int hist[2][kRadixBins];
  uint32_t prefix, low, high;
  unsigned long long placed, placed_before;  // (equal, above) counts: this CTA's, lower ranks'
  int remaining;
  bool settled;
};

// Top-k of token t's `visible` scores on the CTA of rank `rank` among kCtas. With kCtas > 1 the
// token's CTAs are a thread block cluster (Hopper), each holding an equal run of the row's ids; a
// pass's counts and the keys' range are summed across the cluster through distributed shared
// memory, and every CTA finds the same threshold. A long row is then read by kCtas SMs at once,
// its keys in registers.
template <int kCtas>
__device__ __forceinline__ void topk_row(const IndexerTopkParams& p, TopkShared& sh, int64_t t, int64_t visible,
                                         int rank) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  int32_t* out = p.topk + t * p.k;
  // This CTA's ids, [first, first + ids); j below counts from first (ids and positions are int32).
  const int run = static_cast<int>((visible + kCtas - 1) / kCtas);
  const int first = min(static_cast<int>(visible), rank * run);
  const int ids = min(static_cast<int>(visible), first + run) - first;
  const float* score = p.scores + t * p.score_stride + first;

  // Each thread takes a contiguous run of ids (so thread order is id order, for the placing scan at
  // the end), its first kRegisterKeys keys read once into registers, any after them read again
  // where used. visit(key, j) runs for each of the thread's ids j in order; a warp's lanes run
  // the same number of rounds, with j = -1 past a thread's run. The radix passes visit the keys
  // in any order: runs longer than the registers hold are read in strided rounds there instead,
  // so that a warp's loads are coalesced (runs of 32 at 64k tokens, read lane by lane, took a
  // batch-16 top-k from 48 to 52 us).
  // A cluster's CTAs keep fewer (the cluster's addressing takes registers).
  constexpr int kKeys = kCtas > 1 ? kClusterRegisterKeys : kRegisterKeys;
  const int per_thread = (ids + kTopkThreads - 1) / kTopkThreads;
  const int begin = min(ids, tid * per_thread), end = min(ids, begin + per_thread);
  uint32_t keys[kKeys];
#pragma unroll
  for (int c = 0; c < kKeys; ++c) keys[c] = begin + c < end ? order_key(__ldg(score + begin + c)) : 0u;
  const auto for_each_key = [&](auto&& visit) {
#pragma unroll
    for (int c = 0; c < kKeys; ++c)
      if (c < per_thread) visit(keys[c], begin + c < end ? begin + c : -1);
    for (int c = kKeys; c < per_thread; ++c) {
      const int j = begin + c;
      visit(j < end ? order_key(__ldg(score + j)) : 0u, j < end ? j : -1);
    }
  };
  const auto for_each_key_any_order = [&](auto&& visit) {
    if (per_thread <= kKeys) {
      for_each_key(visit);
      return;
    }
    for (int base = 0; base < ids; base += kTopkThreads) {
      const int j = base + tid;
      visit(j < ids ? order_key(__ldg(score + j)) : 0u, j < ids ? j : -1);
    }
  };

  // The keys' range first: the bits that the smallest and the largest key share are every key's,
  // so the radix passes start below them, kDigitBits at a time from the highest bit that differs
  // (scores of one row mostly share sign and exponent: 8-bit passes from the top spent a pass or
  // two on bits no key differs in).
  if (tid == 0) {
    sh.low = 0xffffffffu;
    sh.high = 0;
  }
  __syncthreads();
  uint32_t low = 0xffffffffu, high = 0;
  for_each_key_any_order([&](uint32_t key, int j) {
    if (j < 0) return;
    low = min(low, key);
    high = max(high, key);
  });
  low = __reduce_min_sync(0xffffffffu, low);
  high = __reduce_max_sync(0xffffffffu, high);
  if (lane == 0) {
    atomicMin(&sh.low, low);
    atomicMax(&sh.high, high);
  }
  cluster_barrier<kCtas>();
  low = 0xffffffffu;
  high = 0;
#pragma unroll
  for (int r = 0; r < kCtas; ++r) {
    low = min(low, *cluster_shared<kCtas>(&sh.low, r));
    high = max(high, *cluster_shared<kCtas>(&sh.high, r));
  }

  // Radix select. After each pass the k-th largest key has the bits `prefix` under `mask`; the
  // keys above it under the mask are k - remaining, all chosen, and `remaining` more are chosen
  // among those equal to it under the mask. Keys all equal: every bit is settled already.
  const uint32_t differ = low ^ high;
  int top = differ == 0 ? -1 : 31 - __clz(static_cast<int>(differ));  // the highest bit that differs
  uint32_t mask = top >= 31 ? 0u : 0xffffffffu << (top + 1);
  uint32_t prefix = low & mask;
  int remaining = static_cast<int>(p.k);
  for (int pass = 0; top >= 0; ++pass) {
    const int shift = max(top - kDigitBits + 1, 0);
    const uint32_t digit_mask = (2u << (top - shift)) - 1u;  // the digit's bits, bits [shift, top]
    int* h = sh.hist[pass % 2];
    // Thread i clears and later reads bins kRadixBins - 4 (i + 1) .. kRadixBins - 1 - 4 i, one
    // 16-byte word.
    int4* own = reinterpret_cast<int4*>(h + kRadixBins - kBinsPerThread * (tid + 1));
    *own = make_int4(0, 0, 0, 0);
    __syncthreads();
    for_each_key_any_order([&](uint32_t key, int j) {
      if (j >= 0 && (key & mask) == prefix) atomicAdd(&h[(key >> shift) & digit_mask], 1);
    });
    cluster_barrier<kCtas>();
    int4 bins = make_int4(0, 0, 0, 0);
#pragma unroll
    for (int r = 0; r < kCtas; ++r) {
      const int4 v = *cluster_shared<kCtas>(own, r);
      bins = make_int4(bins.x + v.x, bins.y + v.y, bins.z + v.z, bins.w + v.w);
    }
    // Highest bin first, so the inclusive scan of the threads' sums counts the keys at or above
    // each thread's lowest bin; the bin holding the remaining-th of them is the one whose running
    // count first reaches it.
    const int count[kBinsPerThread] = {bins.w, bins.z, bins.y, bins.x};
    int at_or_above = 0;
    CountScan(sh.scan.count).InclusiveSum(bins.x + bins.y + bins.z + bins.w, at_or_above);
    int above = at_or_above - (bins.x + bins.y + bins.z + bins.w);
#pragma unroll
    for (int b = 0; b < kBinsPerThread; ++b) {
      if (above < remaining && above + count[b] >= remaining) {
        const uint32_t bin = static_cast<uint32_t>(kRadixBins - 1 - (tid * kBinsPerThread + b));
        sh.prefix = prefix | (bin << shift);
        sh.remaining = remaining - above;
        sh.settled = count[b] == sh.remaining;  // the whole bin is chosen: no lower bits needed
      }
      above += count[b];
    }
    __syncthreads();
    prefix = sh.prefix;
    remaining = sh.remaining;
    mask |= digit_mask << shift;
    if (sh.settled) break;  // read by every thread before any writes it again (two barriers on)
    top = shift - 1;
  }

  // One exclusive scan of the threads' (above, equal) counts gives every chosen id its place,
  // #above before it plus min(#equal before it, remaining); a cluster's lower ranks' counts come
  // before a CTA's.
  uint32_t above = 0, equal = 0;
  for_each_key([&](uint32_t key, int j) {
    above += j >= 0 && (key & mask) > prefix ? 1u : 0u;
    equal += j >= 0 && (key & mask) == prefix ? 1u : 0u;
  });
  unsigned long long before = 0, placed = 0;  // #equal in the high half, #above in the low half
  PairScan(sh.scan.pair).ExclusiveSum((static_cast<unsigned long long>(equal) << 32) | above, before, placed);
  if constexpr (kCtas > 1) {
    if (tid == 0) sh.placed = placed;
    cluster_barrier<kCtas>();
    if (tid == 0) {
      unsigned long long lower = 0;
      for (int r = 0; r < rank; ++r) lower += *cluster_shared<kCtas>(&sh.placed, r);
      sh.placed_before = lower;
    }
    __syncthreads();
    before += sh.placed_before;  // each half sums on its own: the counts stay below 2^32
  }
  uint32_t above_before = static_cast<uint32_t>(before), equal_before = static_cast<uint32_t>(before >> 32);
  const auto take_equal = static_cast<uint32_t>(remaining);
  for_each_key([&](uint32_t key, int j) {
    if (j < 0) return;
    const int32_t id = first + j;
    if ((key & mask) > prefix) {
      out[above_before + min(equal_before, take_equal)] = id;
      ++above_before;
    } else if ((key & mask) == prefix) {
      if (equal_before < take_equal) out[above_before + equal_before] = id;
      ++equal_before;
    }
  });
  // No CTA leaves while another may still read its shared memory.
  if constexpr (kCtas > 1) cluster_barrier<kCtas>();
}

// Top-k of token blockIdx.x / kCtas on kCtas CTAs (a cluster where more than one). The launch
// chooses kCtas by the rows' room (score_stride), which a decode graph sizes for later steps; a
// row that one CTA's registers hold is taken by the first CTA alone, the others leaving at once
// (2,048 keys on one CTA: 4.5 us, on two 8.2, on four 9.4; H100, bench_indexer, docs/PERF.md
// session 58).
template <int kCtas>
__global__ void __launch_bounds__(kTopkThreads, 2) topk_kernel(IndexerTopkParams p) {
  // The token's position before the PDL wait: plan data, no kernel writes it (as norm_rope_quant's).
  const int64_t t = blockIdx.x / kCtas;
  const int64_t visible = (p.positions[t] + 1) / p.ratio;
  pdl_wait();
  __shared__ TopkShared shared;
  const int rank = static_cast<int>(blockIdx.x % kCtas);
  if (visible <= p.k) {
    int32_t* out = p.topk + t * p.k;
    if (rank == 0)
      for (int64_t x = threadIdx.x; x < p.k; x += kTopkThreads) out[x] = x < visible ? static_cast<int32_t>(x) : -1;
    return;
  }
  if (kCtas > 1 && visible <= kTopkOneCtaKeys) {
    if (rank == 0) topk_row<1>(p, shared, t, visible, 0);
    return;
  }
  topk_row<kCtas>(p, shared, t, visible, rank);
}

}  // namespace

const char* indexer_score_kernel_name(IndexerScoreKernel kernel) {
  switch (kernel) {
    case IndexerScoreKernel::kExact: return "exact (CUDA cores, CpuOps' order)";
    case IndexerScoreKernel::kTensorCoreBf16: return "tensor cores (bf16 mma.sync)";
  }
  return "unknown";
}

IndexerScoreKernel indexer_score_kernel_for(bool q_bf16, bool keys_bf16_or_packed, int64_t heads, int64_t dh) {
  const bool fits = dh == kIndexerMmaHeadDim && heads >= 1 && heads <= kIndexerMmaMaxHeads;
  return q_bf16 && keys_bf16_or_packed && fits ? IndexerScoreKernel::kTensorCoreBf16 : IndexerScoreKernel::kExact;
}

size_t indexer_scores_smem_bytes(int64_t heads, int64_t dh) {
  return static_cast<size_t>(heads * dh + heads) * sizeof(float);
}

void indexer_scores(const IndexerTopkParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.score_stride <= 0) return;
  if (p.packed_keys && p.score_kernel != IndexerScoreKernel::kTensorCoreBf16)
    throw UsageError(std::string("indexer_scores: packed keys are read by the tensor-core score kernel only, not the ") +
                     indexer_score_kernel_name(p.score_kernel));
  switch (p.score_kernel) {
    case IndexerScoreKernel::kTensorCoreBf16: indexer_mma_scores(p, stream); return;
    case IndexerScoreKernel::kExact: {
      const size_t smem = indexer_scores_smem_bytes(p.heads, p.dh);
      DSV4_CUDA_CHECK(cudaFuncSetAttribute(exact_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
      const dim3 grid(static_cast<unsigned>(p.tokens),
                      static_cast<unsigned>((p.score_stride + kScoreThreads - 1) / kScoreThreads));
      launch_pdl(exact_score_kernel, grid, kScoreThreads, smem, stream, p);
      DSV4_CUDA_CHECK(cudaGetLastError());
      return;
    }
  }
  throw UsageError("indexer_scores: unknown score kernel " + std::to_string(static_cast<int>(p.score_kernel)));
}

int indexer_topk_ctas_for(int64_t tokens, int64_t score_stride) {
  if (score_stride <= kTopkOneCtaKeys) return 1;
  const int64_t wanted = (score_stride + kTopkClusterCtaKeys - 1) / kTopkClusterCtaKeys;
  int ctas = wanted <= 2 ? 2 : wanted <= 4 ? 4 : 8;
  while (ctas > 1 && tokens * ctas > kTopkClusterMaxBlocks) ctas /= 2;
  return ctas;
}

void indexer_select_topk(const IndexerTopkParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.k <= 0) return;
  if (p.k > 0x7fffffff)
    throw UsageError("indexer_select_topk: k=" + std::to_string(p.k) + ", at most 2^31 - 1");
  const int ctas = p.topk_ctas != 0 ? p.topk_ctas : indexer_topk_ctas_for(p.tokens, p.score_stride);
  const auto grid = static_cast<unsigned>(p.tokens * ctas);
  switch (ctas) {
    case 1: launch_pdl(topk_kernel<1>, grid, kTopkThreads, 0, stream, p); break;
    case 2: launch_pdl_clustered(topk_kernel<2>, grid, kTopkThreads, 0, stream, 2u, p); break;
    case 4: launch_pdl_clustered(topk_kernel<4>, grid, kTopkThreads, 0, stream, 4u, p); break;
    case 8: launch_pdl_clustered(topk_kernel<8>, grid, kTopkThreads, 0, stream, 8u, p); break;
    default:
      throw UsageError("indexer_select_topk: topk_ctas=" + std::to_string(p.topk_ctas) + ", not 0, 1, 2, 4 or 8");
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.k <= 0) return;
  indexer_scores(p, stream);
  indexer_select_topk(p, stream);
}

}  // namespace dsv4::kernels
