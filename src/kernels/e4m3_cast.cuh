// core/numeric.h's float_to_e4m3 (the CPU reference's rounding) of two floats in one hardware
// conversion, for kernels that quantise many values: cvt.rn.satfinite.e4m3x2.f32 rounds to nearest
// even (subnormals included) and clamps magnitudes past 448, infinities too, to +-448 as
// float_to_e4m3 does; only NaNs differ (float_to_e4m3 keeps the sign: sign | 0x7f), so they are
// set apart. tests/ops/cast_checks.cu compares the two over every float.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "core/numeric.h"

namespace dsv4::kernels {

// The codes of lo (low byte) and hi (high byte).
__device__ __forceinline__ uint32_t float2_to_e4m3x2(float lo, float hi) {
  uint32_t codes = __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
  const auto nan_code = [](float f) { return (__float_as_uint(f) >> 24 & 0x80u) | 0x7fu; };
  if (isnan(lo)) codes = (codes & 0xff00u) | nan_code(lo);
  if (isnan(hi)) codes = (codes & 0x00ffu) | nan_code(hi) << 8;
  return codes;
}

// round_e4m3 (core/numeric.h): the value of float_to_e4m3's code, the code from the hardware.
__device__ __forceinline__ float round_e4m3_fast(float f) {
  return e4m3_to_float(static_cast<uint8_t>(float2_to_e4m3x2(f, 0.0f) & 0xffu));
}

// 2^n for n in (-127, 128): a normal float, so x * pow2(n) is ldexpf(x, n) exactly.
__device__ __forceinline__ float pow2(int n) { return __uint_as_float(static_cast<uint32_t>(127 + n) << 23); }

}  // namespace dsv4::kernels
