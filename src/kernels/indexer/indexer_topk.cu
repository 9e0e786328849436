// Scores, exact kernel: one thread per (token, entry), the token's queries in shared memory; each
// q.k dot uses CpuOps' order (8 running partial sums combined pairwise) and the head sum runs in
// head order, all without contraction, so the scores equal the CPU's bit for bit. (The
// tensor-core kernel is indexer_mma_scores.cu.) Top-k: one CTA per token finds the k-th largest
// score by a radix select, 8 bits per pass on order-preserving keys, then writes the chosen ids in
// ascending order from one block scan (equal keys: the lowest ids win).
#include "kernels/indexer/indexer_topk.h"

#include <cub/block/block_scan.cuh>

#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/indexer/indexer_mma_scores.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kScoreThreads = 128;
constexpr int kTopkThreads = 512;
constexpr int kRadixBins = 256;
// A thread's first keys, kept in registers from one read of the scores: rows of up to 3,072
// visible entries (12k tokens at ratio 4) are read once, not once per radix pass and twice more.
// Six keep the kernel within 64 registers, two blocks an SM (eight held 71, one block an SM, and
// took an 8k prefill's top-k from 162 to 226 us, docs/PERF.md session 30).
constexpr int kRegisterKeys = 6;

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

__global__ void __launch_bounds__(kTopkThreads, 2) topk_kernel(IndexerTopkParams p) {
  pdl_wait();
  using CountScan = cub::BlockScan<int, kTopkThreads>;
  using PairScan = cub::BlockScan<unsigned long long, kTopkThreads>;
  __shared__ union {
    typename CountScan::TempStorage count;
    typename PairScan::TempStorage pair;
  } scan_storage;
  __shared__ int hist[kRadixBins];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining;
  __shared__ bool s_settled;

  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const int64_t t = blockIdx.x;
  const int64_t visible = (p.positions[t] + 1) / p.ratio;
  int32_t* out = p.topk + t * p.k;

  if (visible <= p.k) {
    for (int64_t x = tid; x < p.k; x += kTopkThreads) out[x] = x < visible ? static_cast<int32_t>(x) : -1;
    return;
  }
  const float* score = p.scores + t * p.score_stride;

  // Each thread takes a contiguous run of ids (so thread order is id order, for the placing scan at
  // the end), its first kRegisterKeys keys read once into registers, any after them read again
  // where used. visit(key, j) runs for each of the thread's ids j in order; a warp's lanes run
  // the same number of rounds (for __match_any_sync), with j = -1 past a thread's run. The radix
  // passes visit the keys in any order: runs longer than the registers hold are read in strided
  // rounds there instead, so that a warp's loads are coalesced (runs of 32 at 64k tokens, read
  // lane by lane, took a batch-16 top-k from 48 to 52 us).
  const auto per_thread = static_cast<int>((visible + kTopkThreads - 1) / kTopkThreads);
  const auto begin = static_cast<int>(min(visible, int64_t{tid} * per_thread));
  const auto end = static_cast<int>(min(visible, int64_t{begin} + per_thread));
  uint32_t keys[kRegisterKeys];
#pragma unroll
  for (int c = 0; c < kRegisterKeys; ++c) keys[c] = begin + c < end ? order_key(__ldg(score + begin + c)) : 0u;
  const auto for_each_key = [&](auto&& visit) {
#pragma unroll
    for (int c = 0; c < kRegisterKeys; ++c)
      if (c < per_thread) visit(keys[c], begin + c < end ? begin + c : -1);
    for (int c = kRegisterKeys; c < per_thread; ++c) {
      const int j = begin + c;
      visit(j < end ? order_key(__ldg(score + j)) : 0u, j < end ? j : -1);
    }
  };
  const auto for_each_key_any_order = [&](auto&& visit) {
    if (per_thread <= kRegisterKeys) {
      for_each_key(visit);
      return;
    }
    for (int64_t base = 0; base < visible; base += kTopkThreads) {
      const int64_t j = base + tid;
      visit(j < visible ? order_key(__ldg(score + j)) : 0u, j < visible ? static_cast<int>(j) : -1);
    }
  };

  // Radix select from the top, 8 bits per pass. After each pass the k-th largest key has the bits
  // `prefix` under `mask`; the keys above it under the mask are k - remaining, all chosen, and
  // `remaining` more are chosen among those equal to it under the mask.
  uint32_t prefix = 0, mask = 0;
  int remaining = static_cast<int>(p.k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (tid < kRadixBins) hist[tid] = 0;
    __syncthreads();
    // A key's bin is counted once per warp round by the lowest lane holding it, so lanes of one
    // warp never collide on a bin.
    for_each_key_any_order([&](uint32_t key, int j) {
      const bool counted = j >= 0 && (key & mask) == prefix;
      const int bin = counted ? static_cast<int>((key >> shift) & 255u) : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (counted && __ffs(peers) - 1 == lane) atomicAdd(&hist[bin], __popc(peers));
    });
    __syncthreads();
    // Thread i < 256 takes bin 255 - i, so its inclusive prefix sum counts the keys at or above its
    // bin; the bin holding the remaining-th of them is the one whose count first reaches it.
    const int count = tid < kRadixBins ? hist[kRadixBins - 1 - tid] : 0;
    int at_or_above = 0;
    CountScan(scan_storage.count).InclusiveSum(count, at_or_above);
    if (tid < kRadixBins && at_or_above >= remaining && at_or_above - count < remaining) {
      s_prefix = prefix | (static_cast<uint32_t>(kRadixBins - 1 - tid) << shift);
      s_remaining = remaining - (at_or_above - count);
      s_settled = count == s_remaining;  // the whole bin is chosen: no lower bits needed
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
    if (s_settled) break;  // read by every thread before any writes it again (two barriers on)
  }

  // One exclusive scan of the threads' (above, equal) counts gives every chosen id its place,
  // #above before it plus min(#equal before it, remaining).
  uint32_t above = 0, equal = 0;
  for_each_key([&](uint32_t key, int j) {
    above += j >= 0 && (key & mask) > prefix ? 1u : 0u;
    equal += j >= 0 && (key & mask) == prefix ? 1u : 0u;
  });
  unsigned long long before = 0;  // #equal before in the high half, #above before in the low half
  PairScan(scan_storage.pair).ExclusiveSum((static_cast<unsigned long long>(equal) << 32) | above, before);
  uint32_t above_before = static_cast<uint32_t>(before), equal_before = static_cast<uint32_t>(before >> 32);
  const auto take_equal = static_cast<uint32_t>(remaining);
  for_each_key([&](uint32_t key, int j) {
    if (j < 0) return;
    if ((key & mask) > prefix) {
      out[above_before + min(equal_before, take_equal)] = static_cast<int32_t>(j);
      ++above_before;
    } else if ((key & mask) == prefix) {
      if (equal_before < take_equal) out[above_before + equal_before] = static_cast<int32_t>(j);
      ++equal_before;
    }
  });
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

void indexer_select_topk(const IndexerTopkParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.k <= 0) return;
  if (p.k > 0x7fffffff)
    throw UsageError("indexer_select_topk: k=" + std::to_string(p.k) + ", at most 2^31 - 1");
  launch_pdl(topk_kernel, static_cast<unsigned>(p.tokens), kTopkThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.k <= 0) return;
  indexer_scores(p, stream);
  indexer_select_topk(p, stream);
}

}  // namespace dsv4::kernels
