// Branch-light versions of core/quant.h's block fake-quantisation for the CPU backend's hot
// loops (activation quantisation of every FP8 linear): power-of-two multiplies instead of
// ldexpf, mantissa rounding on the float's bits instead of encode + decode. Each step is exact
// or rounds once to nearest-even, so the results equal core/quant.h's bit for bit
// (tests/unit/test_cpu_ops.cpp checks every e4m3/e2m1 tie and random blocks).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/numeric.h"

namespace dsv4::cpu {

// 2^e as a float, e in [-126, 127].
inline float pow2f(int e) { return bits_float(static_cast<uint32_t>(e + 127) << 23); }

// The nearest multiple of 2^-k to a, for 0 <= a < 2^(22-k), ties to even: a + 2^(23-k) has
// exactly that resolution, so the addition rounds (nearest-even mode) and the subtraction is exact.
inline float round_to_step(float a, float magic) { return (a + magic) - magic; }

// The e4m3 value nearest to v, |v| <= 448 expected (saturates), ties to even.
inline float round_e4m3_value(float v) {
  const float a = std::fabs(v);
  float r;
  if (a < 0.015625f) {
    r = round_to_step(a, 16384.0f);  // 2^-9 steps: magic 2^14
  } else {
    uint32_t u = float_bits(a);
    u += 0x7ffffu + ((u >> 20) & 1u);  // round the mantissa to 3 bits, ties to even
    r = std::min(bits_float(u & ~0xfffffu), kE4M3Max);
  }
  return std::copysign(r, v);
}

// The e2m1 value nearest to v (grid 0, .5, 1, 1.5, 2, 3, 4, 6), saturating, ties to even.
inline float round_e2m1_value(float v) {
  const float a = std::fabs(v);
  float r;
  if (a < 1.0f) {
    r = round_to_step(a, 4194304.0f);  // 0.5 steps: magic 2^22
  } else {
    uint32_t u = float_bits(a);
    u += 0x1fffffu + ((u >> 22) & 1u);  // round the mantissa to 1 bit, ties to even
    r = std::min(bits_float(u & ~0x3fffffu), kE2M1Max);
  }
  return std::copysign(r, v);
}

// x[0..n) <- its value after a round trip through e4m3 / e2m1 with the pow2 block scale of
// MODEL.md §14: the same as fake_quant_block_e4m3 / _e2m1 of core/quant.h.
inline void fake_quant_e4m3(float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int e = std::clamp(pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max), -126, 127);
  const float down = pow2f(-e), up = pow2f(e);
  for (int64_t i = 0; i < n; ++i) x[i] = round_e4m3_value(x[i] * down) * up;
}

inline void fake_quant_e2m1(float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int e = std::clamp(pow2_scale_exponent(amax, kFp4AmaxFloor, kE2M1Max), -126, 127);
  const float down = pow2f(-e), up = pow2f(e);
  for (int64_t i = 0; i < n; ++i) x[i] = round_e2m1_value(x[i] * down) * up;
}

}  // namespace dsv4::cpu
