// The conversion of checked views and weights into the CUDA kernels' pointer types (the argument
// checks themselves are ops/arg_checks.h, shared with CpuOps).
#pragma once

#include <string>

#include "core/error.h"
#include "kernels/float_ptr.h"
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

}  // namespace dsv4::cuda
