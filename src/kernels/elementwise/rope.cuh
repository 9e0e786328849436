// RoPE's rotation as the CPU computes it (cpu_ops.cpp's rope), shared by the rope kernels and the
// kernels that fuse a rotation into their stores (sparse attention's output, rotated back).
#pragma once

#include <cstdint>

namespace dsv4::kernels {

// The rotation's cosine and sine for a position and frequency: the product in fp32, cos and sin
// in double rounded to fp32, as the CPU computes them.
__device__ __forceinline__ float2 rope_cos_sin(int32_t position, float inv_freq) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
  double s, c;
  sincos(static_cast<double>(angle), &s, &c);
  return make_float2(static_cast<float>(c), static_cast<float>(s));
}

// The pair (a, b) rotated by (cs, sn), each product and sum rounded on its own.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float cs, float sn) {
  return make_float2(__fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn)), __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, cs)));
}

}  // namespace dsv4::kernels
