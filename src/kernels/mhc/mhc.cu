// mHC kernels (see mhc.h). Scalar steps follow CpuOps' cpu_mhc.cpp line by line; the _rn
// intrinsics keep nvcc from fusing the products and sums the CPU rounds separately.
#include "kernels/mhc/mhc.h"

#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

__device__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

constexpr int kWarps = kThreads / 32;
constexpr int kTokensPerBlock = 4;

// Block (token group, chunk, mix group): the dots of mixes [k0, k0 + kGroup) over the chunk, and
// in mix group 0 the sum of squares too. Each dot is accumulated by the same threads in the same
// order whatever the grouping (thread-strided FMAs, a warp's xor reduction, warps added in
// order), so the grouping is a launch choice that never changes a bit: small batches split the
// mixes over more blocks (decode: 16 chunks alone would leave most SMs idle), large ones keep
// them together so x is read once.
template <int kGroup>
__global__ void __launch_bounds__(kThreads) hc_mix_partials_kernel(HcMixPartialsParams p) {
  pdl_wait();
  constexpr int kSums = kGroup + 1;  // the group's dots, then the sum of squares
  __shared__ float warp_sums[kWarps][kTokensPerBlock][kSums];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock;
  const int64_t chunk = (p.width + kHcChunks - 1) / kHcChunks;
  const int64_t begin = blockIdx.y * chunk, end = begin + chunk < p.width ? begin + chunk : p.width;
  const int64_t k0 = static_cast<int64_t>(blockIdx.z) * kGroup;
  const bool squares = blockIdx.z == 0;
  float acc[kTokensPerBlock][kSums];
#pragma unroll
  for (auto& token_acc : acc)
#pragma unroll
    for (float& v : token_acc) v = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    float x[kTokensPerBlock];
#pragma unroll
    for (int tt = 0; tt < kTokensPerBlock; ++tt) {
      x[tt] = t0 + tt < p.tokens ? load_float(p.x, (t0 + tt) * p.width + i) : 0.0f;
      if (squares) acc[tt][kSums - 1] = fmaf(x[tt], x[tt], acc[tt][kSums - 1]);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (k0 + g >= p.mix) break;
      const float f = load_float(p.fn, (k0 + g) * p.width + i);
#pragma unroll
      for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt][g] = fmaf(x[tt], f, acc[tt][g]);
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int tt = 0; tt < kTokensPerBlock; ++tt)
#pragma unroll
    for (int g = 0; g < kSums; ++g) {
      float v = acc[tt][g];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) warp_sums[warp][tt][g] = v;
    }
  __syncthreads();
  for (int e = threadIdx.x; e < kTokensPerBlock * kSums; e += kThreads) {
    const int tt = e / kSums, g = e % kSums;
    const bool is_squares = g == kSums - 1;
    if (t0 + tt >= p.tokens || (is_squares ? !squares : k0 + g >= p.mix)) continue;
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w][tt][g];
    p.partials[((t0 + tt) * kHcChunks + blockIdx.y) * (p.mix + 1) + (is_squares ? p.mix : k0 + g)] = total;
  }
}

// Mix k of token t (chunks added in order); every caller sums the squares in the same order, so
// all agree on the norm.
__device__ float finish_mix(const float* partials, int64_t t, int64_t k, int64_t mix, int64_t width, float norm_eps) {
  const float* part = partials + t * kHcChunks * (mix + 1);
  float dot = 0.0f, ss = 0.0f;
  for (int c = 0; c < kHcChunks; ++c) {
    dot += part[c * (mix + 1) + k];
    ss += part[c * (mix + 1) + mix];
  }
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(width) + norm_eps);
  return __fmul_rn(dot, rs);
}

// Element (i, k) = lane i * n + k of a warp's n x n matrix: the sum of row i (from_row) or column
// k, added in index order from 0 as the CPU's loops add them. Every lane calls it.
__device__ float line_sum(float v, int n, bool from_row) {
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
// by a whole warp; returns the lane's element.
__device__ float warp_sinkhorn(float v, int n, int64_t iters, float eps) {
  const int lane = static_cast<int>(threadIdx.x % 32), i = lane / n;
  float mx = __shfl_sync(0xffffffffu, v, i * n < 32 ? i * n : 31);
#pragma unroll 3
  for (int e = 1; e < n; ++e) mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, i * n + e < 32 ? i * n + e : 31));
  v = expf(__fsub_rn(v, mx));
  v = __fadd_rn(__fdiv_rn(v, line_sum(v, n, true)), eps);
  v = __fdiv_rn(v, __fadd_rn(line_sum(v, n, false), eps));
  for (int64_t it = 1; it < iters; ++it) {
    v = __fdiv_rn(v, __fadd_rn(line_sum(v, n, true), eps));
    v = __fdiv_rn(v, __fadd_rn(line_sum(v, n, false), eps));
  }
  return v;
}

// y[t, begin:end] = sum_j g[j] * x[t, j, begin:end], j ascending, rounded to y's type.
__device__ void weighted_stream_sum(const float* g, FloatPtr x, MutFloatPtr y, int64_t t, int64_t n, int64_t dim,
                                    int64_t begin, int64_t end) {
  for (int64_t d = begin + threadIdx.x; d < end; d += blockDim.x) {
    float acc = __fmul_rn(g[0], load_float(x, t * n * dim + d));
    for (int64_t j = 1; j < n; ++j) acc = __fadd_rn(acc, __fmul_rn(g[j], load_float(x, (t * n + j) * dim + d)));
    store_float(y, t * dim + d, acc);
  }
}

// The part of y one block of the finishing kernels writes.
constexpr int64_t kStreamSumSlice = 1024;

__device__ float affine(float m, float scale, float base) { return __fadd_rn(__fmul_rn(m, scale), base); }

// Block (t, 0): post and comb of token t, on warp 0 (the Sinkhorn's latency is its alone).
// Blocks (t, 1 + s): pre (every block computes it, the same way) and slice s of y.
__global__ void hc_pre_finish_kernel(HcPreFinishParams p) {
  pdl_wait();
  __shared__ float pre[kHcMaxStreams];
  const int64_t t = blockIdx.x, n = p.n, mix = (2 + n) * n;
  const auto k = static_cast<int64_t>(threadIdx.x);
  if (blockIdx.y == 0) {
    if (k >= 32) return;
    if (k < n)
      p.post[t * n + k] = __fmul_rn(
          2.0f, sigmoid(affine(finish_mix(p.partials, t, n + k, mix, n * p.dim, p.norm_eps), load_float(p.scale, 1),
                               load_float(p.base, n + k))));
    const bool element = k < n * n;
    const float c0 = element ? affine(finish_mix(p.partials, t, 2 * n + k, mix, n * p.dim, p.norm_eps),
                                      load_float(p.scale, 2), load_float(p.base, 2 * n + k))
                             : 0.0f;
    const float c = warp_sinkhorn(c0, static_cast<int>(n), p.sinkhorn_iters, p.hc_eps);
    if (element) p.comb[t * n * n + k] = c;
    return;
  }
  if (k < n)
    pre[k] = __fadd_rn(sigmoid(affine(finish_mix(p.partials, t, k, mix, n * p.dim, p.norm_eps), load_float(p.scale, 0),
                                      load_float(p.base, k))),
                       p.hc_eps);
  __syncthreads();
  const int64_t begin = (blockIdx.y - 1) * kStreamSumSlice;
  weighted_stream_sum(pre, p.x, p.y, t, n, p.dim, begin, begin + kStreamSumSlice < p.dim ? begin + kStreamSumSlice : p.dim);
}

// Block (t, s): g of token t (every block computes it, the same way) and slice s of y.
__global__ void hc_head_finish_kernel(HcHeadFinishParams p) {
  pdl_wait();
  __shared__ float g[kHcMaxStreams];
  const int64_t t = blockIdx.x;
  const auto j = static_cast<int64_t>(threadIdx.x);
  if (j < p.n) {
    const float m = finish_mix(p.partials, t, j, p.n, p.n * p.dim, p.norm_eps);
    g[j] = __fadd_rn(sigmoid(affine(m, load_float(p.scale, 0), load_float(p.base, j))), p.hc_eps);
  }
  __syncthreads();
  const int64_t begin = blockIdx.y * kStreamSumSlice;
  weighted_stream_sum(g, p.x, p.y, t, p.n, p.dim, begin, begin + kStreamSumSlice < p.dim ? begin + kStreamSumSlice : p.dim);
}

// Grid (column blocks, rows): row (t, j) = t * n + j of out, looped past the grid's rows, so that no
// thread divides 64-bit indices.
__global__ void hc_post_mix_kernel(HcPostMixParams p) {
  pdl_wait();
  const int64_t d = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (d >= p.dim) return;
  for (int64_t row = blockIdx.y; row < p.tokens * p.n; row += gridDim.y) {
    const int64_t t = row / p.n, j = row % p.n;
    const float* c = p.comb + t * p.n * p.n;
    const int64_t xt = t * p.n * p.dim + d;
    float o = __fmul_rn(c[j], load_float(p.x, xt));
    for (int64_t i = 1; i < p.n; ++i) o = __fadd_rn(o, __fmul_rn(c[i * p.n + j], load_float(p.x, xt + i * p.dim)));
    store_float(p.out, row * p.dim + d, __fadd_rn(__fmul_rn(p.post[t * p.n + j], load_float(p.a, t * p.dim + d)), o));
  }
}

// hc_mix_partials over blocks of kGroup mixes.
template <int kGroup>
void launch_grouped(const HcMixPartialsParams& p, unsigned token_blocks, cudaStream_t stream) {
  const auto groups = static_cast<unsigned>((p.mix + kGroup - 1) / kGroup);
  launch_pdl(hc_mix_partials_kernel<kGroup>, dim3(token_blocks, kHcChunks, groups), kThreads, 0, stream, p);
}

}  // namespace

void hc_mix_partials(const HcMixPartialsParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.mix == 0) return;
  const auto blocks = static_cast<unsigned>((p.tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  // Up to 16 tokens (decode): two mixes per block; up to 256 (large decode batches): eight, x read
  // three times from L2 (all 24 per block hold 184 registers a thread, one block per SM: 69 us
  // a call at 64 tokens on the H200); more (prefill): all of them, x read once.
  if (p.tokens <= 16) {
    launch_grouped<2>(p, blocks, stream);
  } else if (p.tokens <= 256) {
    launch_grouped<8>(p, blocks, stream);
  } else {
    launch_pdl(hc_mix_partials_kernel<static_cast<int>(kHcMaxMix)>, dim3(blocks, kHcChunks, 1), kThreads, 0, stream, p);
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_pre_finish(const HcPreFinishParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  if (p.n > kHcMaxStreams) throw UsageError("hc_pre_finish: " + std::to_string(p.n) + " streams, at most 4");
  const auto slices = static_cast<unsigned>((p.dim + kStreamSumSlice - 1) / kStreamSumSlice);
  launch_pdl(hc_pre_finish_kernel, dim3(static_cast<unsigned>(p.tokens), 1 + slices), kThreads, 0, stream, p);
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
  const int64_t rows = p.tokens * p.n;
  if (rows == 0 || p.dim == 0) return;
  const dim3 grid(static_cast<unsigned>((p.dim + kThreads - 1) / kThreads), static_cast<unsigned>(rows < 65535 ? rows : 65535));
  launch_pdl(hc_post_mix_kernel, grid, kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
