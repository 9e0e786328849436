// Block quantisation with power-of-two (ue8m0) scales, as DeepSeek's kernels do it
// (MODEL.md §14): one scale per block, chosen so the block's amax lands inside the grid.
// Shared by host and device code.
#pragma once

#include "core/numeric.h"

namespace dsv4 {

// Quantise x[0..n) to e4m3 codes with one scale 2^e, e = ceil(log2(max(amax,1e-4)/448)).
// Returns the scale's e8m0 code.
DSV4_HD uint8_t quantize_block_e4m3(const float* x, int n, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const int e = pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
  for (int i = 0; i < n; ++i) codes[i] = float_to_e4m3(ldexpf(x[i], -e));
  return e8m0_from_exponent(e);
}

// Quantise x[0..n) to e2m1 codes with one scale 2^e, e = ceil(log2(max(amax,6*2^-126)/6)).
// Returns the scale's e8m0 code.
DSV4_HD uint8_t quantize_block_e2m1(const float* x, int n, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const int e = pow2_scale_exponent(amax, kFp4AmaxFloor, kE2M1Max);
  for (int i = 0; i < n; ++i) codes[i] = float_to_e2m1(ldexpf(x[i], -e));
  return e8m0_from_exponent(e);
}

// Quantisation-aware rounding in place ("QAT" in MODEL.md §14): x <- q * s, the value the
// block takes after an fp8 (e4m3) round trip with its pow2 block scale.
DSV4_HD void fake_quant_block_e4m3(float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const int e = pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
  for (int i = 0; i < n; ++i) x[i] = ldexpf(round_e4m3(ldexpf(x[i], -e)), e);
}

// The same for fp4 (e2m1) with its pow2 block scale.
DSV4_HD void fake_quant_block_e2m1(float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const int e = pow2_scale_exponent(amax, kFp4AmaxFloor, kE2M1Max);
  for (int i = 0; i < n; ++i) x[i] = ldexpf(round_e2m1(ldexpf(x[i], -e)), e);
}

}  // namespace dsv4
