// CudaOps mHC (MODEL.md §2.4-2.6): the stream-mix projections per token, then the pre mix with
// Sinkhorn, the post mix and the head's stream weighting, all in fp32 like CpuOps (the
// projections in fixed chunks, kernels::hc_mix_partials).
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/mhc/mhc.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

// Scratch for the chunked projections of the streams x [T, n, D] onto `mix` rows, which lives until
// the finishing kernel has read it.
StreamBuffer partials_buffer(const char* op, ConstTensorView x, int64_t mix, cudaStream_t stream, CaptureArena* arena) {
  if (mix > kernels::kHcMaxMix)
    throw UsageError(std::string(op) + ": " + std::to_string(mix) + " mixes (hc_mult " + std::to_string(x.dim(1)) +
                     ") exceed the kernel's " + std::to_string(kernels::kHcMaxMix));
  return StreamBuffer(static_cast<size_t>(x.dim(0) * kernels::kHcChunks * (mix + 1)) * sizeof(float), stream, arena);
}

// The projections onto fn's `mix` rows (kernels::hc_mix_partials).
StreamBuffer mix_partials(const char* op, ConstTensorView x, kernels::FloatPtr fn, int64_t mix, cudaStream_t stream,
                          CaptureArena* arena) {
  StreamBuffer partials = partials_buffer(op, x, mix, stream, arena);
  kernels::hc_mix_partials({float_ptr(x), fn, partials.get<float>(), x.dim(0), x.dim(1) * x.dim(2), mix}, stream);
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
  const kernels::FloatPtr y_norm = p.y_norm != nullptr ? weight_floats("hc_pre", p.y_norm, {D}) : kernels::FloatPtr{};
  if (T == 0 || n == 0) return;
  if (p.y_norm != nullptr && T <= kernels::kHcPreFusedMaxTokens && D <= kernels::kHcPreFusedMaxDim) {
    // A batch-1 step: the projections, the finish and the norm in one launch (the same bits).
    const StreamBuffer partials = partials_buffer("hc_pre", p.x, mix, stream_, arena());
    kernels::HcPreFusedParams fused;
    fused.finish = {partials.get<float>(), p.norm_eps, scale, base, float_ptr(p.x), float_ptr(p.y), p.post.data<float>(),
                    p.comb.data<float>(), T, n, D, p.sinkhorn_iters, p.hc_eps};
    fused.mix = {float_ptr(p.x), fn, partials.get<float>(), T, n * D, mix};
    fused.y_norm = y_norm;
    fused.done = hc_pre_done_;
    kernels::hc_pre_fused(fused, stream_);
    return;
  }
  const StreamBuffer partials = mix_partials("hc_pre", p.x, fn, mix, stream_, arena());
  kernels::hc_pre_finish({partials.get<float>(), p.norm_eps, scale, base, float_ptr(p.x), float_ptr(p.y),
                          p.post.data<float>(), p.comb.data<float>(), T, n, D, p.sinkhorn_iters, p.hc_eps},
                         stream_);
  if (p.y_norm != nullptr)
    kernels::rms_norm_rows({float_ptr(ConstTensorView(p.y)), y_norm, float_ptr(p.y), T, D, p.norm_eps}, stream_);
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
