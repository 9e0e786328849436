// Exact scalar conversions between float32 and the engine's narrow formats (bf16, fp8 e4m3,
// fp4 e2m1, e8m0 scales), shared by host and device code so the CPU reference and the CUDA
// kernels round identically. All rounding is round-to-nearest-even.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSV4_HD __host__ __device__ __forceinline__
#else
#define DSV4_HD inline
#endif

namespace dsv4 {

DSV4_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DSV4_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- bfloat16 -------------------------------------------------------------------------------

DSV4_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Round-to-nearest-even; NaN stays a (quiet) NaN with its sign, infinities stay infinite.
DSV4_HD uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// float -> bf16 -> float, the rounding every bf16 store applies.
DSV4_HD float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// ---- fp8 e4m3fn -----------------------------------------------------------------------------
// Bias 7, 3 mantissa bits, no infinities; 0x7F / 0xFF are NaN; largest finite 448;
// subnormals are m/8 * 2^-6.

constexpr float kE4M3Max = 448.0f;

DSV4_HD float e4m3_to_float(uint8_t code) {
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int exp_field = (code >> 3) & 0xf;
  const int mant = code & 0x7;
  if (exp_field == 0xf && mant == 0x7) return NAN;
  if (exp_field == 0) return sign * ldexpf(static_cast<float>(mant), -9);
  return sign * ldexpf(static_cast<float>(8 + mant), exp_field - 10);
}

// Round-to-nearest-even onto the e4m3 grid, saturating to +-448 (infinities included).
// NaN becomes the NaN code with the input's sign.
DSV4_HD uint8_t float_to_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  if ((u & 0x7fffffffu) > 0x7f800000u) return sign | 0x7f;
  const float a = fabsf(f);
  if (a >= kE4M3Max) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal step 2^-9; a carry into code 8 is exactly 2^-6
    return sign | static_cast<uint8_t>(rintf(a * 512.0f));
  }
  int e = static_cast<int>((float_bits(a) >> 23) & 0xff) - 127;  // floor(log2 a), a normal
  const int q = static_cast<int>(rintf(ldexpf(a, 3 - e)));        // in [8, 16]
  return sign | static_cast<uint8_t>(((e + 7) << 3) + q - 8);
}

DSV4_HD float round_e4m3(float f) { return e4m3_to_float(float_to_e4m3(f)); }

// Two e4m3 codes as fp16 bits on integer operations, each value scaled by 2^-8 (exactly: e4m3's
// bias is 8 below fp16's, so the code's exponent and mantissa bits, shifted into place, are the
// fp16 of value * 2^-8, subnormals included); NaN codes give an fp16 NaN. `spread` holds the codes
// in bits 8..15 and 24..31 and zeros elsewhere (one byte permute from a word of codes). One fp16
// multiply by 256 then gives what a cvt.rn.f16x2.e4m3x2 of the two codes gives.
DSV4_HD uint32_t e4m3x2_spread_to_f16x2_over_256(uint32_t spread) {
  const uint32_t magnitude = (spread >> 1) & 0x3F803F80u;        // 7 bits per half at 7..13
  const uint32_t nan = (magnitude + 0x00800080u) & 0x40004000u;  // only 0x3F80 (code 0x7F) reaches bit 14
  return (spread & 0x80008000u) | magnitude | nan;               // NaN: exponent 31, mantissa != 0
}

// ---- fp4 e2m1 -------------------------------------------------------------------------------
// Codes 0..7 are the magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}; bit 3 is the sign.

constexpr float kE2M1Max = 6.0f;

DSV4_HD float e2m1_to_float(uint8_t code) {
  const int mag = code & 0x7;
  // mag 0,1 are subnormal (0, 0.5); mag >= 2 is 2^((mag >> 1) - 1) * (1 + (mag & 1) / 2).
  const float v = mag < 2 ? 0.5f * static_cast<float>(mag)
                          : static_cast<float>(1 << ((mag >> 1) - 1)) * (1.0f + 0.5f * (mag & 1));
  return (code & 0x8) ? -v : v;
}

// Round-to-nearest-even onto the e2m1 grid, saturating to +-6. Ties go to the even code:
// .25->0, .75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. NaN maps to (signed) zero.
DSV4_HD uint8_t float_to_e2m1(float f) {
  const uint8_t sign = (float_bits(f) >> 31) ? 0x8 : 0x0;
  const float a = fabsf(f);
  uint8_t mag;
  if (!(a > 0.25f)) mag = 0;  // also catches NaN
  else if (a < 0.75f) mag = 1;
  else if (a <= 1.25f) mag = 2;
  else if (a < 1.75f) mag = 3;
  else if (a <= 2.5f) mag = 4;
  else if (a < 3.5f) mag = 5;
  else if (a <= 5.0f) mag = 6;
  else mag = 7;
  return sign | mag;
}

DSV4_HD float round_e2m1(float f) { return e2m1_to_float(float_to_e2m1(f)); }

// Packed pairs: element 2i in the low nibble, element 2i+1 in the high nibble.
DSV4_HD uint8_t pack_e2m1x2(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xf) | ((odd & 0xf) << 4));
}
DSV4_HD uint8_t e2m1x2_low(uint8_t byte) { return byte & 0xf; }
DSV4_HD uint8_t e2m1x2_high(uint8_t byte) { return byte >> 4; }

// ---- e8m0 power-of-two scales ---------------------------------------------------------------

constexpr uint8_t kE8M0Nan = 0xff;

// 2^(b-127); code 0 is 2^-127 (a float subnormal, still exact); 0xFF is NaN.
DSV4_HD float e8m0_to_float(uint8_t code) {
  if (code == kE8M0Nan) return NAN;
  return ldexpf(1.0f, static_cast<int>(code) - 127);
}

// ceil(log2(v)) for a positive normal float: exponent(v) - 127 + (mantissa(v) != 0).
DSV4_HD int ceil_log2(float v) {
  const uint32_t u = float_bits(v);
  return static_cast<int>((u >> 23) & 0xff) - 127 + ((u & 0x7fffffu) != 0 ? 1 : 0);
}

// The e8m0 code of 2^e, clamped to the representable range [2^-127, 2^127].
DSV4_HD uint8_t e8m0_from_exponent(int e) {
  const int b = e + 127;
  return static_cast<uint8_t>(b < 0 ? 0 : (b > 254 ? 254 : b));
}

// Exponent of the power-of-two block scale DeepSeek's ue8m0 quantisers use:
// s = 2^ceil(log2(max(amax, floor) / qmax)) so that every |x|/s <= qmax.
DSV4_HD int pow2_scale_exponent(float amax, float amax_floor, float qmax) {
  return ceil_log2(fmaxf(amax, amax_floor) / qmax);
}

// The amax floors of MODEL.md §14.
constexpr float kFp8AmaxFloor = 1e-4f;
constexpr float kFp4AmaxFloor = 6.0f * 1.1754943508222875e-38f;  // 6 * 2^-126

}  // namespace dsv4
