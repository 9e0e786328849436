// core/numeric.h's float_to_bf16 (the CPU reference's rounding) of two floats in one hardware
// conversion, for kernels that store many bf16 values: cvt.rn.bf16x2.f32 rounds to nearest even
// (subnormals kept, overflow to infinity) as float_to_bf16 does; only NaNs differ (the hardware
// writes one canonical NaN, float_to_bf16 keeps the sign and top payload bits), so they are set
// apart. tests/ops/cast_checks.cu compares the two over every float.
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace dsv4::kernels {

// The hardware's pair: float_to_bf16(lo) in the low half and float_to_bf16(hi) in the high half
// for every float but NaN (for callers that have set NaNs apart themselves).
__device__ __forceinline__ uint32_t float2_to_bf16x2_unless_nan(float lo, float hi) {
  uint32_t pair;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));
  return pair;
}

// float_to_bf16(lo) in the low half, float_to_bf16(hi) in the high half.
__device__ __forceinline__ uint32_t float2_to_bf16x2(float lo, float hi) {
  if (isnan(lo) || isnan(hi))
    return static_cast<uint32_t>(float_to_bf16(lo)) | static_cast<uint32_t>(float_to_bf16(hi)) << 16;
  return float2_to_bf16x2_unless_nan(lo, hi);
}

}  // namespace dsv4::kernels
