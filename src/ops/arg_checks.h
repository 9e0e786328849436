// The argument checks every backend's ops start with, shared so that CpuOps and CudaOps reject
// the same inputs with the same messages (each names the op, the argument and what was wrong).
#pragma once

#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace dsv4 {

// Activations are fp32 or bf16.
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

}  // namespace dsv4
