// mHC kernels (see mhc.h). Scalar steps follow CpuOps' cpu_mhc.cpp line by line; the _rn
// intrinsics keep nvcc from fusing the products and sums the CPU rounds separately.
#include "kernels/mhc/mhc.h"

#include "backend/cuda/cuda_check.h"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

__device__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

constexpr int kWarps = kThreads / 32;
constexpr int kTokensPerBlock = 4;
constexpr int kSums = static_cast<int>(kHcMaxMix) + 1;  // the mixes' dots, then the sum of squares

__global__ void __launch_bounds__(kThreads) hc_mix_partials_kernel(HcMixPartialsParams p) {
  __shared__ float warp_sums[kWarps][kTokensPerBlock][kSums];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock;
  const int64_t chunk = (p.width + kHcChunks - 1) / kHcChunks;
  const int64_t begin = blockIdx.y * chunk, end = begin + chunk < p.width ? begin + chunk : p.width;
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
      acc[tt][kSums - 1] = fmaf(x[tt], x[tt], acc[tt][kSums - 1]);
    }
#pragma unroll
    for (int k = 0; k < kHcMaxMix; ++k) {
      if (k >= p.mix) break;
      const float f = load_float(p.fn, k * p.width + i);
#pragma unroll
      for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt][k] = fmaf(x[tt], f, acc[tt][k]);
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int tt = 0; tt < kTokensPerBlock; ++tt)
#pragma unroll
    for (int k = 0; k < kSums; ++k) {
      float v = acc[tt][k];
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) warp_sums[warp][tt][k] = v;
    }
  __syncthreads();
  for (int e = threadIdx.x; e < kTokensPerBlock * kSums; e += kThreads) {
    const int tt = e / kSums, k = e % kSums;
    if (t0 + tt >= p.tokens || (k >= p.mix && k != kSums - 1)) continue;
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w][tt][k];
    p.partials[((t0 + tt) * kHcChunks + blockIdx.y) * (p.mix + 1) + (k == kSums - 1 ? p.mix : k)] = total;
  }
}

// Thread k < mix of the block gets mix k of token t (chunks added in order); every thread sums
// the squares in the same order, so all agree on the norm.
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

// Column k of the n x n matrix c (row-major) divided by its sum + eps, as the CPU does it.
__device__ void normalise_column(float* c, int64_t n, int64_t k, float eps) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum = __fadd_rn(sum, c[i * n + k]);
  for (int64_t i = 0; i < n; ++i) c[i * n + k] = __fdiv_rn(c[i * n + k], __fadd_rn(sum, eps));
}

// The n x n Sinkhorn of MODEL.md §2.4 on c (row-major, shared memory), exactly as the CPU's
// sinkhorn(): thread i < n takes row i in the row steps and column i in the column steps, and
// each element sees the CPU's operations in the CPU's order. All threads of the block call it.
__device__ void sinkhorn(float* c, int64_t n, int64_t iters, float eps) {
  const auto i = static_cast<int64_t>(threadIdx.x);
  if (i < n) {
    float* row = c + i * n;
    float mx = row[0];
    for (int64_t k = 1; k < n; ++k) mx = fmaxf(mx, row[k]);
    float sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      row[k] = expf(__fsub_rn(row[k], mx));
      sum = __fadd_rn(sum, row[k]);
    }
    for (int64_t k = 0; k < n; ++k) row[k] = __fadd_rn(__fdiv_rn(row[k], sum), eps);
  }
  __syncthreads();
  if (i < n) normalise_column(c, n, i, eps);
  __syncthreads();
  for (int64_t it = 1; it < iters; ++it) {
    if (i < n) {
      float sum = 0;
      for (int64_t k = 0; k < n; ++k) sum = __fadd_rn(sum, c[i * n + k]);
      for (int64_t k = 0; k < n; ++k) c[i * n + k] = __fdiv_rn(c[i * n + k], __fadd_rn(sum, eps));
    }
    __syncthreads();
    if (i < n) normalise_column(c, n, i, eps);
    __syncthreads();
  }
}

// y[t, :] = sum_j g[j] * x[t, j, :], j ascending, rounded to y's type.
__device__ void weighted_stream_sum(const float* g, FloatPtr x, MutFloatPtr y, int64_t t, int64_t n, int64_t dim) {
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = __fmul_rn(g[0], load_float(x, t * n * dim + d));
    for (int64_t j = 1; j < n; ++j) acc = __fadd_rn(acc, __fmul_rn(g[j], load_float(x, (t * n + j) * dim + d)));
    store_float(y, t * dim + d, acc);
  }
}

__device__ float affine(float m, float scale, float base) { return __fadd_rn(__fmul_rn(m, scale), base); }

__global__ void hc_pre_finish_kernel(HcPreFinishParams p) {
  extern __shared__ float smem[];  // mixes[mix], pre[n], then comb[n * n]
  const int64_t t = blockIdx.x, n = p.n, mix = (2 + n) * n;
  float* m = smem;
  float* pre = m + mix;
  float* c = pre + n;
  const auto k = static_cast<int64_t>(threadIdx.x);
  if (k < mix) m[k] = finish_mix(p.partials, t, k, mix, n * p.dim, p.norm_eps);
  __syncthreads();
  if (k < n) {
    pre[k] = __fadd_rn(sigmoid(affine(m[k], load_float(p.scale, 0), load_float(p.base, k))), p.hc_eps);
    p.post[t * n + k] = __fmul_rn(2.0f, sigmoid(affine(m[n + k], load_float(p.scale, 1), load_float(p.base, n + k))));
  }
  if (k < n * n) c[k] = affine(m[2 * n + k], load_float(p.scale, 2), load_float(p.base, 2 * n + k));
  __syncthreads();
  sinkhorn(c, n, p.sinkhorn_iters, p.hc_eps);
  if (k < n * n) p.comb[t * n * n + k] = c[k];
  weighted_stream_sum(pre, p.x, p.y, t, n, p.dim);
}

__global__ void hc_head_finish_kernel(HcHeadFinishParams p) {
  extern __shared__ float g[];  // [n]
  const int64_t t = blockIdx.x;
  const auto j = static_cast<int64_t>(threadIdx.x);
  if (j < p.n) {
    const float m = finish_mix(p.partials, t, j, p.n, p.n * p.dim, p.norm_eps);
    g[j] = __fadd_rn(sigmoid(affine(m, load_float(p.scale, 0), load_float(p.base, j))), p.hc_eps);
  }
  __syncthreads();
  weighted_stream_sum(g, p.x, p.y, t, p.n, p.dim);
}

__global__ void hc_post_mix_kernel(HcPostMixParams p) {
  const int64_t total = p.tokens * p.n * p.dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % p.dim, j = (e / p.dim) % p.n, t = e / (p.dim * p.n);
    const float* c = p.comb + t * p.n * p.n;
    const int64_t xt = t * p.n * p.dim + d;
    float o = __fmul_rn(c[j], load_float(p.x, xt));
    for (int64_t i = 1; i < p.n; ++i) o = __fadd_rn(o, __fmul_rn(c[i * p.n + j], load_float(p.x, xt + i * p.dim)));
    store_float(p.out, e, __fadd_rn(__fmul_rn(p.post[t * p.n + j], load_float(p.a, t * p.dim + d)), o));
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

void hc_mix_partials(const HcMixPartialsParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.mix == 0) return;
  const auto blocks = static_cast<unsigned>((p.tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  hc_mix_partials_kernel<<<dim3(blocks, kHcChunks), kThreads, 0, stream>>>(p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_pre_finish(const HcPreFinishParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  const size_t smem = static_cast<size_t>((2 + p.n) * p.n + p.n + p.n * p.n) * sizeof(float);
  hc_pre_finish_kernel<<<static_cast<unsigned>(p.tokens), kThreads, smem, stream>>>(p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_head_finish(const HcHeadFinishParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  const size_t smem = static_cast<size_t>(p.n) * sizeof(float);
  hc_head_finish_kernel<<<static_cast<unsigned>(p.tokens), kThreads, smem, stream>>>(p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_post_mix(const HcPostMixParams& p, cudaStream_t stream) {
  const int64_t total = p.tokens * p.n * p.dim;
  if (total == 0) return;
  hc_post_mix_kernel<<<grid_for(total), kThreads, 0, stream>>>(p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
