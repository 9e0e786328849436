// Reading and writing the CPU backend's activation tensors (kF32 or kBF16) as fp32 rows. A store
// rounds to the tensor's dtype: that rounding is the "stored bf16" of MODEL.md. The argument
// checks are ops/arg_checks.h, shared with the other backends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "core/tensor.h"
#include "ops/arg_checks.h"
#include "ops/ops.h"

namespace dsv4::cpu {

// The value a float takes when stored with dtype t.
inline float round_to(DType t, float v) { return t == DType::kBF16 ? round_bf16(v) : v; }

// dst[i] = v[offset + i] for i < n.
inline void load_floats(ConstTensorView v, int64_t offset, int64_t n, float* dst) {
  if (v.dtype() == DType::kF32) {
    const float* s = v.data<float>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
  } else {
    const uint16_t* s = v.data<uint16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
  }
}

// v[offset + i] = src[i] rounded to v's dtype.
inline void store_floats(TensorView v, int64_t offset, int64_t n, const float* src) {
  if (v.dtype() == DType::kF32) {
    float* d = v.data<float>() + offset;
    for (int64_t i = 0; i < n; ++i) d[i] = src[i];
  } else {
    uint16_t* d = v.data<uint16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
  }
}

// The whole tensor as fp32.
inline std::vector<float> load_all(ConstTensorView v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  load_floats(v, 0, v.numel(), out.data());
  return out;
}

// A CPU weight's fp32 values, checked against the expected logical shape.
inline const float* weight_f32(const char* op, const Weight* w, const Shape& shape) {
  if (w == nullptr) throw UsageError(std::string(op) + ": a required weight is missing");
  if (w->shape != shape)
    throw UsageError(std::string(op) + ": weight " + w->name + " has shape " + shape_str(w->shape) + ", expected " +
                     shape_str(shape));
  return w->data.view().data<float>();
}

// Sum of a[i] * b[i] with 8 running partial sums combined in a fixed order: a deterministic
// order that the compiler can still vectorise.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Sum of squares, in the same fixed order as dot.
inline float sum_squares(const float* a, int64_t n) { return dot(a, a, n); }

}  // namespace dsv4::cpu
