// Scores: one thread per (token, entry), the token's queries in shared memory; each q.k dot uses
// CpuOps' order (8 running partial sums combined pairwise) and the head sum runs in head order,
// all without contraction, so the scores equal the CPU's bit for bit. Top-k: one CTA per token
// finds the k-th largest score by a 4-pass radix select on order-preserving keys, then writes
// the chosen ids in ascending order with block scans (equal keys: the lowest ids win).
#include "kernels/indexer/indexer_topk.h"

#include <cub/block/block_scan.cuh>

#include "backend/cuda/cuda_check.h"

namespace dsv4::kernels {
namespace {

constexpr int kScoreThreads = 128;
constexpr int kTopkThreads = 256;

__device__ float dot8(const float* a, FloatPtr b, int64_t b_off, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i + j], load_float(b, b_off + i + j)));
  for (int j = 0; i < n; ++i, ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i], load_float(b, b_off + i)));
  return __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])),
                   __fadd_rn(__fadd_rn(acc[4], acc[5]), __fadd_rn(acc[6], acc[7])));
}

__global__ void score_kernel(IndexerTopkParams p) {
  extern __shared__ float smem[];
  float* q_s = smem;                  // [heads, dh]
  float* w_s = q_s + p.heads * p.dh;  // [heads] w * weight_scale
  const int64_t i = blockIdx.x;       // token of the batch
  const IndexerSeqDesc seq = p.seqs[p.seq_of_token[i]];
  const int64_t visible = (seq.start_pos + (i - seq.token_begin) + 1) / p.ratio;
  if (blockIdx.y * static_cast<int64_t>(kScoreThreads) >= visible) return;  // the whole CTA
  for (int64_t x = threadIdx.x; x < p.heads * p.dh; x += blockDim.x) q_s[x] = load_float(p.q, i * p.heads * p.dh + x);
  for (int64_t h = threadIdx.x; h < p.heads; h += blockDim.x)
    w_s[h] = __fmul_rn(load_float(p.weights, i * p.heads + h), p.weight_scale);
  __syncthreads();
  const int64_t j = blockIdx.y * static_cast<int64_t>(kScoreThreads) + threadIdx.x;
  if (j >= visible) return;
  float acc = 0.0f;
  for (int64_t h = 0; h < p.heads; ++h)
    acc = __fadd_rn(acc, __fmul_rn(w_s[h], fmaxf(dot8(q_s + h * p.dh, seq.keys, j * p.dh, p.dh), 0.0f)));
  p.scores[i * p.score_stride + j] = isnan(acc) ? -INFINITY : acc;
}

// Unsigned keys in the order of the floats (-0 counted as +0, as the CPU's comparisons do).
__device__ uint32_t order_key(float f) {
  const uint32_t u = float_bits(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(IndexerTopkParams p) {
  using Scan = cub::BlockScan<int, kTopkThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining;
  __shared__ int s_carry_equal, s_carry_chosen;

  const int64_t i = blockIdx.x;
  const IndexerSeqDesc seq = p.seqs[p.seq_of_token[i]];
  const int64_t visible = (seq.start_pos + (i - seq.token_begin) + 1) / p.ratio;
  const float* score = p.scores + i * p.score_stride;
  int32_t* out = p.topk + i * p.k;

  if (visible <= p.k) {
    for (int64_t x = threadIdx.x; x < p.k; x += blockDim.x) out[x] = x < visible ? static_cast<int32_t>(x) : -1;
    return;
  }

  // Radix select of the k-th largest key, 8 bits at a time from the top.
  uint32_t prefix = 0, mask = 0;
  int remaining = static_cast<int>(p.k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
      const uint32_t key = order_key(score[j]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, b = 255;
      while (above + hist[b] < remaining) above += hist[b--];
      s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
      s_remaining = remaining - above;
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
    __syncthreads();
  }
  // `prefix` is the k-th largest key; `remaining` entries equal to it are taken, lowest ids first.
  if (threadIdx.x == 0) s_carry_equal = s_carry_chosen = 0;
  __syncthreads();
  for (int64_t base = 0; base < visible; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    const uint32_t key = j < visible ? order_key(score[j]) : 0u;
    const int equal = j < visible && key == prefix ? 1 : 0;
    int equal_before = 0, equal_total = 0;
    Scan(scan_storage).ExclusiveSum(equal, equal_before, equal_total);
    __syncthreads();
    const int carry_equal = s_carry_equal;
    const int chosen = j < visible && (key > prefix || (equal && carry_equal + equal_before < remaining)) ? 1 : 0;
    int chosen_before = 0, chosen_total = 0;
    Scan(scan_storage).ExclusiveSum(chosen, chosen_before, chosen_total);
    const int carry_chosen = s_carry_chosen;
    if (chosen) out[carry_chosen + chosen_before] = static_cast<int32_t>(j);
    __syncthreads();
    if (threadIdx.x == 0) {
      s_carry_equal = carry_equal + equal_total;
      s_carry_chosen = carry_chosen + chosen_total;
    }
    __syncthreads();
  }
}

}  // namespace

size_t indexer_scores_smem_bytes(int64_t heads, int64_t dh) {
  return static_cast<size_t>(heads * dh + heads) * sizeof(float);
}

void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.k <= 0) return;
  const int64_t max_visible = p.score_stride;
  if (max_visible > 0) {
    const size_t smem = indexer_scores_smem_bytes(p.heads, p.dh);
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const dim3 grid(static_cast<unsigned>(p.tokens),
                    static_cast<unsigned>((max_visible + kScoreThreads - 1) / kScoreThreads));
    score_kernel<<<grid, kScoreThreads, smem, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
  }
  topk_kernel<<<static_cast<unsigned>(p.tokens), kTopkThreads, 0, stream>>>(p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
