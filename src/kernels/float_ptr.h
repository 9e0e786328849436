// Activation and plain-weight arrays as kernels see them: fp32 or bf16 behind one pointer type,
// read as fp32 and stored with core/numeric.h's rounding (the CPU backend's "stored bf16").
#pragma once

#include <cstdint>

#include "core/numeric.h"
#if defined(__CUDACC__)
#include "kernels/bf16_cast.cuh"
#endif

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

// Whether p may be read or written in 16-byte accesses (load_float8 / store_float8, uint4 and
// float4 copies); the launchers check it before choosing their 16-byte kernels.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

// Values i .. i + 7 of a 16-byte aligned run (i a multiple of 8), in 16-byte loads and stores.
__device__ __forceinline__ void load_float8(FloatPtr p, int64_t i, float (&v)[8]) {
  if (p.bf16) {
    const uint4 w = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.data) + i);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = bf16_to_float(static_cast<uint16_t>(words[j / 2] >> (16 * (j % 2))));
  } else {
    const auto* f = reinterpret_cast<const float4*>(static_cast<const float*>(p.data) + i);
    const float4 a = f[0], b = f[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}

__device__ __forceinline__ void store_float8(MutFloatPtr p, int64_t i, const float (&v)[8]) {
  if (p.bf16) {
    uint32_t words[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) words[j] = float2_to_bf16x2(v[2 * j], v[2 * j + 1]);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.data) + i) = make_uint4(words[0], words[1], words[2], words[3]);
  } else {
    auto* f = reinterpret_cast<float4*>(static_cast<float*>(p.data) + i);
    f[0] = make_float4(v[0], v[1], v[2], v[3]);
    f[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}
#endif

}  // namespace dsv4::kernels
