// The values of dummy weights (`--load-format dummy`): the counter-based bits of
// core/counter_bits.h (keyed by counter_key(seed, name)) made into normal values that host and
// device evaluate identically, so random full-size weights can be made where they live (on the
// GPU, without a checkpoint or a host copy) and still equal the CPU backend's bit for bit.
#pragma once

#include <cstdint>

#include "core/counter_bits.h"
#include "core/numeric.h"

namespace dsv4 {

// An approximately standard normal value for element `index` of the tensor keyed `key`: the sum
// of four 16-bit uniforms of one 64-bit draw (Irwin-Hall, mean 2, variance 1/3), centred and
// scaled to unit variance. It is bounded (|z| < 3.47) and needs no transcendental function, so
// every platform computes the same float; dummy weights need realistic scale, not exact tails.
DSV4_HD float dummy_normal(uint64_t key, uint64_t index) {
  const uint64_t bits = counter_bits(key, index);
  const uint32_t sum = static_cast<uint32_t>(bits & 0xFFFF) + static_cast<uint32_t>((bits >> 16) & 0xFFFF) +
                       static_cast<uint32_t>((bits >> 32) & 0xFFFF) + static_cast<uint32_t>(bits >> 48);
  // sum in [0, 4 * 65535]; (sum + 2) / 65536 is the sum of four uniforms on (0, 1) up to 2^-15.
  constexpr float kSqrt3 = 1.7320508075688772f;
  return (static_cast<float>(sum + 2) * (1.0f / 65536.0f) - 2.0f) * kSqrt3;
}

// The largest |dummy_normal| can be (4 * 65535 + 2 = 262142 -> (262142 / 65536 - 2) * sqrt(3)).
inline constexpr float kDummyNormalBound = 3.4641f;

// The pow2 scale exponent e of a dummy FP8 weight (one scale for the whole tensor): the smallest
// with every value mean + std * z inside the e4m3 range times 2^e.
DSV4_HD int dummy_fp8_scale_exponent(float mean, float std) {
  const float amax = (mean < 0 ? -mean : mean) + (std < 0 ? -std : std) * kDummyNormalBound;
  return pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
}

// The e4m3 code of element `index` of a dummy FP8 weight whose scale is 2^e (inv_scale = 2^-e,
// exact, so the division rounds once, in float_to_e4m3).
DSV4_HD uint8_t dummy_e4m3_code(uint64_t key, uint64_t index, float mean, float std, float inv_scale) {
  return float_to_e4m3((mean + std * dummy_normal(key, index)) * inv_scale);
}

}  // namespace dsv4
