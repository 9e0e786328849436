// The conversion of checked views and weights into the CUDA kernels' pointer types (the argument
// checks themselves are ops/arg_checks.h, shared with CpuOps).
#pragma once

#include <string>

#include "core/error.h"
#include "kernels/float_ptr.h"
#include "kernels/gemm/e2m1_layout.h"
#include "kernels/gemm/simple_gemm.h"
#include "ops/arg_checks.h"
#include "ops/ops.h"

namespace dsv4::cuda {

inline kernels::FloatPtr float_ptr(ConstTensorView v) { return {v.bytes(), v.dtype() == DType::kBF16}; }
inline kernels::MutFloatPtr float_ptr(TensorView v) { return {v.bytes(), v.dtype() == DType::kBF16}; }

// A plain fp32/bf16 weight's values, checked against the expected logical shape.
inline kernels::FloatPtr weight_floats(const char* op, const Weight* w, const Shape& shape) {
  if (w == nullptr) throw UsageError(std::string(op) + ": a required weight is missing");
  if (w->shape != shape)
    throw UsageError(std::string(op) + ": weight " + w->name + " has shape " + shape_str(w->shape) + ", expected " +
                     shape_str(shape));
  if (w->format != WeightFormat::kPlain || !is_float_activation(w->data.dtype()))
    throw UsageError(std::string(op) + ": weight " + w->name + " must be a plain f32 or bf16 tensor, it holds " +
                     std::string(dtype_name(w->data.dtype())));
  return float_ptr(ConstTensorView(w->data.view()));
}

// A linear weight as the GEMM kernels read it: plain f32/bf16, or FP8 codes with fp32 block
// scales in CudaOps' layout; checked against the expected [rows, cols].
struct GemmWeightView {
  const void* data = nullptr;
  kernels::GemmWeight type = kernels::GemmWeight::kF32;
  const float* scale = nullptr;
  int64_t scale_ld = 0;
};

// An MXFP4 weight kept as stored (CudaOptions::fp4_experts) rather than cast to FP8.
inline bool is_stored_fp4(const Weight* w) {
  return w != nullptr && w->format == WeightFormat::kMxfp4 && w->data.dtype() == DType::kI8;
}

inline GemmWeightView gemm_weight(const char* op, const Weight* w, int64_t rows, int64_t cols) {
  if (w == nullptr) throw UsageError(std::string(op) + ": the weight is missing");
  if (w->shape != Shape{rows, cols})
    throw UsageError(std::string(op) + ": weight " + w->name + " has shape " + shape_str(w->shape) + ", expected " +
                     shape_str({rows, cols}));
  GemmWeightView v;
  v.data = w->data.view().bytes();
  if (w->format == WeightFormat::kPlain) {
    if (w->data.dtype() == DType::kF32) v.type = kernels::GemmWeight::kF32;
    else if (w->data.dtype() == DType::kBF16) v.type = kernels::GemmWeight::kBF16;
    else
      throw UsageError(std::string(op) + ": weight " + w->name + " holds " + std::string(dtype_name(w->data.dtype())) +
                       ", not f32 or bf16");
    return v;
  }
  const int64_t kb = (cols + 127) / 128;  // 128x128 weight blocks
  const Shape scale_shape = {(rows + 127) / 128, (kb + 3) / 4 * 4};
  if (is_stored_fp4(w))
    throw UsageError(std::string(op) + ": FP4 weight " + w->name + " is kept as stored (CudaOptions::fp4_experts, " +
                     "--fp4-experts on), which only the routed experts read, in the default numerics with " +
                     "--fp8-gemm mma");
  if (w->data.dtype() != DType::kF8E4M3 || w->scale.dtype() != DType::kF32 || w->scale.shape() != scale_shape)
    throw UsageError(std::string(op) + ": FP8 weight " + w->name + " is not in CudaOps' layout (e4m3 codes and f32 " +
                     "scales " + shape_str(scale_shape) + ")");
  v.type = kernels::GemmWeight::kE4M3;
  v.scale = w->scale.view().data<float>();
  v.scale_ld = scale_shape[1];
  return v;
}

// An MXFP4 weight kept as stored (CudaOptions::fp4_experts): its e2m1 codes and per-32 shifts in
// kernels::e2m1_device_layout's layout and the block scales of its FP8 cast; checked against
// [rows, cols].
struct Fp4WeightView {
  const uint8_t* data = nullptr;
  const uint8_t* shift = nullptr;
  const float* scale = nullptr;
  int64_t scale_ld = 0;
};

inline Fp4WeightView stored_fp4_weight(const char* op, const Weight* w, int64_t rows, int64_t cols) {
  if (!is_stored_fp4(w)) throw UsageError(std::string(op) + ": weight " + (w ? w->name : "?") + " is not FP4 as stored");
  const int64_t kb = (cols + 127) / 128;
  const Shape scale_shape = {(rows + 127) / 128, (kb + 3) / 4 * 4};
  const int64_t layout_rows = kernels::e2m1_layout_rows(rows);
  if (w->shape != Shape{rows, cols} || w->data.shape() != Shape{layout_rows, cols / 2} || w->aux.dtype() != DType::kU8 ||
      w->aux.shape() != Shape{layout_rows, cols / 32} || w->scale.dtype() != DType::kF32 || w->scale.shape() != scale_shape)
    throw UsageError(std::string(op) + ": FP4 weight " + w->name + " of shape " + shape_str(w->shape) +
                     " is not in CudaOps' layout for " + shape_str({rows, cols}));
  return {w->data.view().data<uint8_t>(), w->aux.view().data<uint8_t>(), w->scale.view().data<float>(), scale_shape[1]};
}

}  // namespace dsv4::cuda
