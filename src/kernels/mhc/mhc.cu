// mHC kernels (see mhc.h). Scalar steps follow CpuOps' cpu_mhc.cpp line by line; the _rn
// intrinsics keep nvcc from fusing the products and sums the CPU rounds separately.
#include "kernels/mhc/mhc.h"

#include "backend/cuda/cuda_check.h"
#include "kernels/block_reduce.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

__device__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void hc_mixes_kernel(HcMixesParams p) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x, k = blockIdx.y;
  float dot = 0, ss = 0;
  for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) {
    const float v = load_float(p.x, t * p.width + i);
    dot = fmaf(v, load_float(p.fn, k * p.width + i), dot);
    ss = fmaf(v, v, ss);
  }
  dot = block_sum(dot, scratch);
  ss = block_sum(ss, scratch);
  if (threadIdx.x == 0) {
    const float mean = ss / static_cast<float>(p.width);
    const float rs = 1.0f / sqrtf(mean + p.norm_eps);
    p.mixes[t * p.mix + k] = __fmul_rn(dot, rs);
  }
}

__device__ void normalise_columns(float* c, int64_t n, float eps) {
  for (int64_t k = 0; k < n; ++k) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum = __fadd_rn(sum, c[i * n + k]);
    for (int64_t i = 0; i < n; ++i) c[i * n + k] = __fdiv_rn(c[i * n + k], __fadd_rn(sum, eps));
  }
}

// The n x n Sinkhorn of MODEL.md §2.4 on c (row-major), exactly as the CPU's sinkhorn().
__device__ void sinkhorn(float* c, int64_t n, int64_t iters, float eps) {
  for (int64_t i = 0; i < n; ++i) {
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
  normalise_columns(c, n, eps);
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int64_t k = 0; k < n; ++k) sum = __fadd_rn(sum, c[i * n + k]);
      for (int64_t k = 0; k < n; ++k) c[i * n + k] = __fdiv_rn(c[i * n + k], __fadd_rn(sum, eps));
    }
    normalise_columns(c, n, eps);
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
  extern __shared__ float smem[];  // pre[n], then comb[n * n]
  float* pre = smem;
  float* c = smem + p.n;
  const int64_t t = blockIdx.x, n = p.n, mix = (2 + n) * n;
  const float* m = p.mixes + t * mix;
  if (threadIdx.x == 0) {
    const float s0 = load_float(p.scale, 0), s1 = load_float(p.scale, 1), s2 = load_float(p.scale, 2);
    for (int64_t j = 0; j < n; ++j) {
      pre[j] = __fadd_rn(sigmoid(affine(m[j], s0, load_float(p.base, j))), p.hc_eps);
      p.post[t * n + j] = __fmul_rn(2.0f, sigmoid(affine(m[n + j], s1, load_float(p.base, n + j))));
    }
    for (int64_t k = 0; k < n * n; ++k) c[k] = affine(m[2 * n + k], s2, load_float(p.base, 2 * n + k));
    sinkhorn(c, n, p.sinkhorn_iters, p.hc_eps);
    for (int64_t k = 0; k < n * n; ++k) p.comb[t * n * n + k] = c[k];
  }
  __syncthreads();
  weighted_stream_sum(pre, p.x, p.y, t, n, p.dim);
}

__global__ void hc_head_finish_kernel(HcHeadFinishParams p) {
  extern __shared__ float g[];  // [n]
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    const float s0 = load_float(p.scale, 0);
    for (int64_t j = 0; j < p.n; ++j)
      g[j] = __fadd_rn(sigmoid(affine(p.mixes[t * p.n + j], s0, load_float(p.base, j))), p.hc_eps);
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

void hc_mixes(const HcMixesParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.mix == 0) return;
  hc_mixes_kernel<<<dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.mix)), kThreads, 0, stream>>>(p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hc_pre_finish(const HcPreFinishParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return;
  const size_t smem = static_cast<size_t>(p.n + p.n * p.n) * sizeof(float);
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
