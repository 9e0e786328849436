// The argument checks every CudaOps op starts with (the same rules and messages as CpuOps'), and
// the conversion of checked views and weights into the kernels' pointer types.
#pragma once

#include <string>

#include "core/error.h"
#include "kernels/float_ptr.h"
#include "ops/ops.h"

namespace dsv4::cuda {

inline bool is_float_activation(DType t) { return t == DType::kF32 || t == DType::kBF16; }

inline void expect_shape(const char* op, const char* arg, ConstTensorView v, const Shape& shape) {
  if (v.shape() != shape)
    throw UsageError(std::string(op) + ": " + arg + " has shape " + shape_str(v.shape()) + ", expected " +
                     shape_str(shape));
}

inline void expect_dtype(const char* op, const char* arg, ConstTensorView v, DType t) {
  if (v.dtype() != t)
    throw UsageError(std::string(op) + ": " + arg + " has dtype " + std::string(dtype_name(v.dtype())) +
                     ", expected " + std::string(dtype_name(t)));
}

inline void expect_float(const char* op, const char* arg, ConstTensorView v) {
  if (!is_float_activation(v.dtype()))
    throw UsageError(std::string(op) + ": " + arg + " has dtype " + std::string(dtype_name(v.dtype())) +
                     ", expected f32 or bf16");
}

inline void expect_rank(const char* op, const char* arg, ConstTensorView v, int rank) {
  if (v.rank() != rank)
    throw UsageError(std::string(op) + ": " + arg + " has shape " + shape_str(v.shape()) + ", expected rank " +
                     std::to_string(rank));
}

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
