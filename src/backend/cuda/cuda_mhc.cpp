// CudaOps mHC (MODEL.md §2.4-2.6): the stream-mix projections per token, then the pre mix with
// Sinkhorn, the post mix and the head's stream weighting, all in fp32 like CpuOps (the
// projections in fixed chunks, kernels::hc_mix_partials).
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "kernels/mhc/mhc.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

// The chunked projections of the streams x [T, n, D] onto fn's `mix` rows (kernels::hc_mix_partials),
// in scratch that lives until the finishing kernel has read it.
StreamBuffer mix_partials(const char* op, ConstTensorView x, kernels::FloatPtr fn, int64_t mix, cudaStream_t stream,
                          CaptureArena* arena) {
  if (mix > kernels::kHcMaxMix)
    throw UsageError(std::string(op) + ": " + std::to_string(mix) + " mixes (hc_mult " + std::to_string(x.dim(1)) +
                     ") exceed the kernel's " + std::to_string(kernels::kHcMaxMix));
  const int64_t T = x.dim(0), width = x.dim(1) * x.dim(2);
  StreamBuffer partials(static_cast<size_t>(T * kernels::kHcChunks * (mix + 1)) * sizeof(float), stream, arena);
  kernels::hc_mix_partials({float_ptr(x), fn, partials.get<float>(), T, width, mix}, stream);
  return partials;
}

}  // namespace

void CudaOps::hc_pre(const HcPreParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), n = p.x.dim(1), D = p.x.dim(2), mix = (2 + n) * n;
  const kernels::FloatPtr fn = weight_floats("hc_pre", p.fn, {mix, n * D});
  const kernels::FloatPtr scale = weight_floats("hc_pre", p.scale, {3});
  const kernels::FloatPtr base = weight_floats("hc_pre", p.base, {mix});
  expect_shape("hc_pre", "y", p.y, {T, D});
  expect_float("hc_pre", "y", p.y);
  expect_shape("hc_pre", "post", p.post, {T, n});
  expect_dtype("hc_pre", "post", p.post, DType::kF32);
  expect_shape("hc_pre", "comb", p.comb, {T, n, n});
  expect_dtype("hc_pre", "comb", p.comb, DType::kF32);
  if (T == 0 || n == 0) return;
  const StreamBuffer partials = mix_partials("hc_pre", p.x, fn, mix, stream_, arena());
  kernels::hc_pre_finish({partials.get<float>(), p.norm_eps, scale, base, float_ptr(p.x), float_ptr(p.y),
                          p.post.data<float>(), p.comb.data<float>(), T, n, D, p.sinkhorn_iters, p.hc_eps},
                         stream_);
}

void CudaOps::hc_post(const HcPostParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), n = p.x.dim(1), D = p.x.dim(2);
  expect_float("hc_post", "out", p.out);
  kernels::hc_post_mix({float_ptr(p.a), float_ptr(p.x), p.post.data<float>(), p.comb.data<float>(), float_ptr(p.out),
                        T, n, D},
                       stream_);
}

void CudaOps::hc_head(const HcHeadParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), n = p.x.dim(1), D = p.x.dim(2);
  const kernels::FloatPtr fn = weight_floats("hc_head", p.fn, {n, n * D});
  const kernels::FloatPtr scale = weight_floats("hc_head", p.scale, {1});
  const kernels::FloatPtr base = weight_floats("hc_head", p.base, {n});
  expect_shape("hc_head", "y", p.y, {T, D});
  expect_float("hc_head", "y", p.y);
  if (T == 0 || n == 0) return;
  const StreamBuffer partials = mix_partials("hc_head", p.x, fn, n, stream_, arena());
  kernels::hc_head_finish({partials.get<float>(), p.norm_eps, scale, base, float_ptr(p.x), float_ptr(p.y), T, n, D,
                           p.hc_eps},
                          stream_);
}

}  // namespace dsv4::cuda
