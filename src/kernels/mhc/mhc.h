// Launchers for the mHC kernels of CudaOps (MODEL.md §2.4-2.6): the stream-mix projections, the
// pre mix with its Sinkhorn normalisation, the post mix and the head's stream weighting. fp32
// math in the CPU backend's operation order; the projections' dot products are chunked block
// reductions (a fixed order per token, not the CPU's BLAS order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

// The mixes' projections, in pieces: the flattened streams x[t] (width n * D) are cut into
// kHcChunks fixed chunks, and partials[t, c, k] = x[t, chunk c] . fn[k, chunk c] for k < mix,
// partials[t, c, mix] = x[t, chunk c] . x[t, chunk c]. The finishing kernels add the chunks in
// order: mixes[t, k] = (sum_c partials[t, c, k]) / sqrt(sum_c partials[t, c, mix] / width +
// norm_eps). A token's sums run in one fixed order whatever the batch: decode batches take blocks
// of 4 tokens, one chunk and a group of the mixes; prefill batches (over 256 tokens) a kernel in
// which each thread owns whole sums of 2 tokens (the same bits, several times faster there).
// Streams up to 32768 wide (V4-Pro: 28672).
constexpr int kHcChunks = 16;
constexpr int64_t kHcMaxStreams = 4;
constexpr int64_t kHcMaxMix = 24;  // (2 + n) * n for n <= 4
struct HcMixPartialsParams {
  FloatPtr x;                 // [tokens, width]
  FloatPtr fn;                // [mix, width]
  float* partials = nullptr;  // [tokens, kHcChunks, mix + 1]
  int64_t tokens = 0;
  int64_t width = 0;          // n * D
  int64_t mix = 0;            // <= kHcMaxMix
};
void hc_mix_partials(const HcMixPartialsParams& p, cudaStream_t stream);

// From the mixes: pre[j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps, post[t, j] =
// 2 sigmoid(m[n+j] * scale[1] + base[n+j]), comb[t] = Sinkhorn(m[2n..] * scale[2] + base[2n..]);
// y[t, :] = sum_j pre[j] * x[t, j, :] (j ascending). Per token one block for post and comb (the
// Sinkhorn on one warp, an element per lane, every element computed as the CPU's serial loop
// does) and blocks for slices of y.
struct HcPreFinishParams {
  const float* partials = nullptr;  // [tokens, kHcChunks, (2+n)*n + 1] from hc_mix_partials
  float norm_eps = 0;
  FloatPtr scale;                // [3]
  FloatPtr base;                 // [(2+n)*n]
  FloatPtr x;                    // [tokens, n, dim]
  MutFloatPtr y;                 // [tokens, dim]
  float* post = nullptr;         // [tokens, n]
  float* comb = nullptr;         // [tokens, n, n]
  int64_t tokens = 0;
  int64_t n = 0;
  int64_t dim = 0;
  int64_t sinkhorn_iters = 0;
  float hc_eps = 0;
};
void hc_pre_finish(const HcPreFinishParams& p, cudaStream_t stream);

// hc_mix_partials, hc_pre_finish and then an RMSNorm of y (with `y_norm` [dim] and finish.norm_eps)
// in one launch, for steps of up to kHcPreFusedMaxTokens tokens: the blocks (one token each) write
// their partials as hc_mix_partials does, and the last of a token's blocks to finish (a counter in
// `done`, which it leaves at zero again) finishes the token: a warp for post and comb, the others
// for y, kept in shared memory rounded to y's type, and its norm in rms_norm_rows' order (the sums
// of its block of threads, virtual threads on fewer warps). The same bits as hc_mix_partials,
// hc_pre_finish and rms_norm_rows in turn. Calls sharing `done` must not overlap. Measured on the
// H200: 13.7 us against 16.1 for the three launches at one token, 66.8 us at 16 (a decode step
// 30.7 -> 35.5 ms: each block reads all of fn for its one token), hence one token.
constexpr int64_t kHcPreFusedMaxTokens = 1;
constexpr int64_t kHcPreFusedMaxDim = 8192;  // y of a token in shared memory
struct HcPreFusedParams {
  HcMixPartialsParams mix;    // x = finish.x, partials = finish.partials
  HcPreFinishParams finish;
  FloatPtr y_norm;            // [dim]
  unsigned* done = nullptr;   // [tokens] zeros
};
void hc_pre_fused(const HcPreFusedParams& p, cudaStream_t stream);

// g[j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps; y[t, :] = sum_j g[j] * x[t, j, :].
struct HcHeadFinishParams {
  const float* partials = nullptr;  // [tokens, kHcChunks, n + 1] from hc_mix_partials
  float norm_eps = 0;
  FloatPtr scale;                // [1]
  FloatPtr base;                 // [n]
  FloatPtr x;                    // [tokens, n, dim]
  MutFloatPtr y;                 // [tokens, dim]
  int64_t tokens = 0;
  int64_t n = 0;
  int64_t dim = 0;
  float hc_eps = 0;
};
void hc_head_finish(const HcHeadFinishParams& p, cudaStream_t stream);

// out[t, j, :] = post[t, j] * a[t, :] + sum_i comb[t, i, j] * x[t, i, :] (i ascending), rounded
// as the CPU rounds: bit-identical to CpuOps::hc_post.
struct HcPostMixParams {
  FloatPtr a;                    // [tokens, dim]
  FloatPtr x;                    // [tokens, n, dim]
  const float* post = nullptr;   // [tokens, n]
  const float* comb = nullptr;   // [tokens, n, n]
  MutFloatPtr out;               // [tokens, n, dim]
  int64_t tokens = 0;
  int64_t n = 0;
  int64_t dim = 0;
};
void hc_post_mix(const HcPostMixParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
