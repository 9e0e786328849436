// Activation and plain-weight arrays as kernels see them: fp32 or bf16 behind one pointer type,
// read as fp32 and stored with core/numeric.h's rounding (the CPU backend's "stored bf16").
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace dsv4::kernels {

// A read-only fp32 (bf16 false) or bf16 (bf16 true) array.
struct FloatPtr {
  const void* data = nullptr;
  bool bf16 = false;
};

// A writable fp32 or bf16 array; stores round to nearest even.
struct MutFloatPtr {
  void* data = nullptr;
  bool bf16 = false;
};

#if defined(__CUDACC__)
__device__ __forceinline__ float load_float(FloatPtr p, int64_t i) {
  return p.bf16 ? bf16_to_float(static_cast<const uint16_t*>(p.data)[i]) : static_cast<const float*>(p.data)[i];
}

__device__ __forceinline__ float load_float(MutFloatPtr p, int64_t i) {
  return load_float(FloatPtr{p.data, p.bf16}, i);
}

__device__ __forceinline__ void store_float(MutFloatPtr p, int64_t i, float v) {
  if (p.bf16) static_cast<uint16_t*>(p.data)[i] = float_to_bf16(v);
  else static_cast<float*>(p.data)[i] = v;
}
#endif

}  // namespace dsv4::kernels
