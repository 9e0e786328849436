// The clamped SwiGLU of the MoE experts (MODEL.md §6):
// out = row_weight * silu(min(gate, limit)) * clamp(up, -limit, limit), limit 0 meaning no clamp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

struct SwigluParams {
  FloatPtr gate;                       // [rows, cols]
  FloatPtr up;                         // [rows, cols]
  const float* row_weight = nullptr;   // [rows], or nullptr for 1
  MutFloatPtr out;                     // [rows, cols]
  float limit = 0;
  int64_t rows = 0;
  int64_t cols = 0;
};

void swiglu(const SwigluParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
