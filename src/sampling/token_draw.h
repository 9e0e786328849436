// The seeded draw of one token from processed logits, defined so that the host sampler, the CPU
// backend and the CUDA kernel (Ops::sample_rows) pick the same token bit for bit: every step is
// an exactly rounded double operation or integer arithmetic, in an order that does not depend on
// how the work is split.
//
// For a row x[V] and its DrawRow:
//   temperature 0: the argmax (ties: the lowest id; NaN ignored unless x[0] is NaN, then 0).
//   else, with top = the largest non-NaN logit (none, or not finite: nothing can be drawn),
//   weight  w_i = floor(2^44 * exp((x_i - top) / temperature)) (draw_weight; 2^44 at the top, 0 for
//                 NaN, -inf and tokens under about 2^-44 of the top's probability),
//   kept    w_i > 0 and w_i >= ceil(min_p * 2^44),
//   order   the tokens by logit, largest first (draw_order_key), ties by ascending id,
//   top-k   when 0 < top_k < kept: the first top_k kept tokens in that order,
//   top-p   when top_p < 1: the shortest prefix in that order of those kept whose weights add up
//           to at least ceil(top_p * their total) (top_p_need),
//   draw    u = the top 53 bits of counter_bits(splitmix64_mix(seed), index), target =
//           floor(u * total / 2^53); the first kept token in ascending id whose running weight
//           exceeds target.
// Weights are integers, so totals and running sums are exact in any order; exp is evaluated by
// draw_exp_parts with plain multiplies and adds (no fused multiply-add: compile host code calling it
// with -ffp-contract=off; device code uses the _rn intrinsics, which are never fused), so host and
// device compute the same weights. The weights' resolution (2^-44 of the top) drops tokens far too
// unlikely to matter: a whole vocabulary of them holds under 1e-8 of the mass.
#pragma once

#include <cstdint>
#include <vector>

#include "core/counter_bits.h"
#include "core/numeric.h"

namespace dsv4 {

// One row's draw: what Ops::sample_rows reads per row (a [rows, 4] i64 tensor of these).
struct DrawRow {
  uint64_t seed = 0;         // the request's seed
  uint64_t index = 0;        // the draw's index in the request: its output tokens so far
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  int32_t top_k = 0;         // <= 0: off
};
static_assert(sizeof(DrawRow) == 32, "DrawRow is four i64 words");

inline constexpr int kDrawWeightBits = 44;
// The most top logprobs a row returns (SamplingParams::top_logprobs' bound).
inline constexpr int kDrawMaxTopLogprobs = 20;
// Running weights stay below 2^63 for vocabularies up to this size.
inline constexpr int64_t kDrawMaxVocab = int64_t{1} << (63 - kDrawWeightBits);

DSV4_HD double draw_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

DSV4_HD double draw_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// 2^e for -1022 <= e <= 1023, exactly.
DSV4_HD double draw_pow2(int e) {
  const uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
#endif
}

// floor(2^44 * e^y) for y <= 0 (0 for y below -31, where it is 0 or 1, and for NaN), by
// draw_exp_parts: e^y =
// 2^k e^r with k = y log2(e) - 1/2 rounded toward zero (y log2(e) rounded to an integer, the
// conversion instructions' rounding rather than a floor call) and r = y - k ln 2 (fdlibm's
// two-part ln 2, so k ln 2's high part is exact), e^r by its Taylor series to r^12 (|r| <= 0.35:
// error under 2e-16).
// e^y = draw_exp_parts(y, k) * 2^k for finite y <= 0, the first factor in [0.70, 1.42].
DSV4_HD double draw_exp_parts(double y, int& k_out) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 significant bits: k * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  // 1 / n!, folded by the compiler (exactly rounded, the same on host and device).
  constexpr double c12 = 1.0 / 479001600.0, c11 = 1.0 / 39916800.0, c10 = 1.0 / 3628800.0, c9 = 1.0 / 362880.0,
                   c8 = 1.0 / 40320.0, c7 = 1.0 / 5040.0, c6 = 1.0 / 720.0, c5 = 1.0 / 120.0, c4 = 1.0 / 24.0,
                   c3 = 1.0 / 6.0;
  const int k_int = static_cast<int>(draw_add(draw_mul(y, kLog2e), -0.5));
  const double k = static_cast<double>(k_int);
  const double r = draw_add(draw_add(y, -draw_mul(k, kLn2Hi)), -draw_mul(k, kLn2Lo));
  double p = c12;
  const double coefficients[] = {c11, c10, c9, c8, c7, c6, c5, c4, c3};
  for (int i = 0; i < 9; ++i) p = draw_add(draw_mul(p, r), coefficients[i]);
  p = draw_add(draw_mul(p, r), 0.5);
  p = draw_add(draw_mul(p, r), 1.0);
  p = draw_add(draw_mul(p, r), 1.0);
  k_out = k_int;
  return p;
}

DSV4_HD uint64_t draw_weight_of_exponent(double y) {
  if (!(y >= -31.0)) return 0;
  int k = 0;
  const double p = draw_exp_parts(y, k);
  return static_cast<uint64_t>(static_cast<int64_t>(draw_mul(p, draw_pow2(kDrawWeightBits + k))));  // < 2^45
}

// The weight of logit x in a row whose largest logit is `top`, at 1 / temperature `inv_t`.
DSV4_HD uint64_t draw_weight(float x, float top, double inv_t) {
  return draw_weight_of_exponent(draw_mul(draw_add(static_cast<double>(x), -static_cast<double>(top)), inv_t));
}

// 1 / temperature, exactly rounded.
DSV4_HD double draw_inverse_temperature(float temperature) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(1.0, static_cast<double>(temperature));
#else
  return 1.0 / static_cast<double>(temperature);
#endif
}

// The smallest weight min-p keeps (at least 1: a weight of 0 is never kept).
DSV4_HD uint64_t draw_min_weight(float min_p) {
  const uint64_t w = static_cast<uint64_t>(ceil(static_cast<double>(min_p) * draw_pow2(kDrawWeightBits)));
  return w > 0 ? w : 1;
}

// An order-preserving key of a float: a > b  <=>  key(a) > key(b), a == b  <=>  key(a) == key(b)
// (for non-NaN: -0 and +0 share a key).
DSV4_HD uint32_t draw_order_key(float x) {
  const uint32_t u = float_bits(x == 0.0f ? 0.0f : x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// floor(a * b / 2^s) for s in [1, 64] and a product below 2^(64 + s).
DSV4_HD uint64_t draw_mul_shift(uint64_t a, uint64_t b, int s) {
  const uint64_t lo = a * b;
#if defined(__CUDA_ARCH__)
  const uint64_t hi = __umul64hi(a, b);
#else
  // The high word from 32-bit halves (ISO C++ has no 128-bit integer).
  const uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32, b_lo = b & 0xffffffffu, b_hi = b >> 32;
  const uint64_t cross_lo = a_lo * b_hi, cross_hi = a_hi * b_lo;
  const uint64_t middle = ((a_lo * b_lo) >> 32) + (cross_lo & 0xffffffffu) + (cross_hi & 0xffffffffu);
  const uint64_t hi = a_hi * b_hi + (cross_lo >> 32) + (cross_hi >> 32) + (middle >> 32);
#endif
  return s == 64 ? hi : (hi << (64 - s)) | (lo >> s);
}

// ceil(top_p * total) with top_p truncated to 40 fractional bits (exact for top_p >= 2^-16),
// for top_p in (0, 1] and total < 2^63.
DSV4_HD uint64_t top_p_need(float top_p, uint64_t total) {
  const uint64_t scaled = static_cast<uint64_t>(static_cast<double>(top_p) * draw_pow2(40));
  const uint64_t floor_part = draw_mul_shift(total, scaled, 40);
  const uint64_t low_bits = total * scaled & ((uint64_t{1} << 40) - 1);  // the product's low 40 bits
  return floor_part + (low_bits != 0 ? 1 : 0);
}

// The draw's target: floor(u * total / 2^53) < total, with u the 53 random bits of (seed, index).
DSV4_HD uint64_t draw_target(uint64_t seed, uint64_t index, uint64_t total) {
  const uint64_t u = counter_bits(splitmix64_mix(seed), index) >> 11;
  return draw_mul_shift(u, total, 53);
}

// ---- logprobs ---------------------------------------------------------------------------------
// The raw distribution's logprobs (log_softmax of the logits, temperature 1) the same on host and
// device: logprob(x) = (x - top) - L with L = log(sum_i e^(x_i - top)), the sum taken exactly as
// a 128-bit integer of the terms floor(2^96 e^(x_i - top)) (terms under 2^-96 dropped: they move L
// by less than V 2^-96) and L by draw_log. NaN logits count for nothing.

struct DrawU128 {
  uint64_t hi = 0;
  uint64_t lo = 0;
};

DSV4_HD DrawU128 draw_add_u128(DrawU128 a, DrawU128 b) {
  DrawU128 r;
  r.lo = a.lo + b.lo;
  r.hi = a.hi + b.hi + (r.lo < a.lo ? 1 : 0);
  return r;
}

// floor(2^96 e^y) for y <= 0 (0 below -66 and for NaN).
DSV4_HD DrawU128 draw_logprob_term(double y) {
  DrawU128 t;
  if (!(y >= -66.0)) return t;
  int k = 0;
  const double p = draw_exp_parts(y, k);  // [0.70, 1.42]: p 2^53 is an integer below 2^54
  const auto m = static_cast<uint64_t>(static_cast<int64_t>(draw_mul(p, draw_pow2(53))));
  const int shift = k + 96 - 53;  // in [-53, 43]
  if (shift >= 0) {
    t.lo = m << shift;
    t.hi = shift > 0 ? m >> (64 - shift) : 0;
  } else {
    t.lo = m >> -shift;
  }
  return t;
}

// e ln 2 + log(1 + d) for d in [sqrt(1/2) - 1, sqrt(2) - 1): log(1 + d) = 2 atanh(t) with
// t = d / (2 + d), |t| <= 0.172, by its series to t^23 (error under 1e-17). d is taken as given,
// so a small d keeps its digits.
DSV4_HD double draw_log_reduced(double d, int e) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
#if defined(__CUDA_ARCH__)
  const double t = __ddiv_rn(d, draw_add(d, 2.0));
#else
  const double t = d / (d + 2.0);
#endif
  const double t2 = draw_mul(t, t);
  constexpr double c23 = 1.0 / 23.0, c21 = 1.0 / 21.0, c19 = 1.0 / 19.0, c17 = 1.0 / 17.0, c15 = 1.0 / 15.0,
                   c13 = 1.0 / 13.0, c11 = 1.0 / 11.0, c9 = 1.0 / 9.0, c7 = 1.0 / 7.0, c5 = 1.0 / 5.0, c3 = 1.0 / 3.0;
  const double coefficients[] = {c21, c19, c17, c15, c13, c11, c9, c7, c5, c3, 1.0};
  double s = c23;
  for (int i = 0; i < 11; ++i) s = draw_add(draw_mul(s, t2), coefficients[i]);
  const double log_m = draw_mul(draw_mul(2.0, t), s);
  const double ed = static_cast<double>(e);
  return draw_add(draw_mul(ed, kLn2Hi), draw_add(draw_mul(ed, kLn2Lo), log_m));
}

// log(v) for a normal v > 0: v = m 2^e with m in [sqrt(1/2), sqrt(2)), then draw_log_reduced(m - 1, e).
DSV4_HD double draw_log(double v) {
  uint64_t bits = 0;
#if defined(__CUDA_ARCH__)
  bits = static_cast<uint64_t>(__double_as_longlong(v));
#else
  std::memcpy(&bits, &v, sizeof bits);
#endif
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  double m = draw_mul(v, draw_pow2(-e));  // [1, 2)
  if (m > 1.4142135623730951) {
    m = draw_mul(m, 0.5);
    ++e;
  }
  return draw_log_reduced(draw_add(m, -1.0), e);  // m - 1 is exact
}

// L = log of the sum of e^(x_i - top) from its exact 128-bit sum of draw_logprob_terms (>= 2^96:
// the top's term): log(1 + d) with d = sum / 2^96 - 1 taken from the integer, so that a sum just
// above the top's term keeps its digits.
DSV4_HD double draw_log_normalizer(DrawU128 sum) {
  sum.hi -= uint64_t{1} << 32;  // - 2^96
  const double d = draw_mul(draw_add(draw_mul(static_cast<double>(sum.hi), draw_pow2(64)), static_cast<double>(sum.lo)),
                            draw_pow2(-96));
  return d < 0.4142135623730951 ? draw_log_reduced(d, 0) : draw_log(draw_add(d, 1.0));
}

// The quiet NaN every logprob without a value is (one bit pattern on host and device, whose NaN
// arithmetic differs).
DSV4_HD float draw_nan() { return bits_float(0x7fc00000u); }

// A logit's logprob in a row of largest logit `top` and normalizer L (draw_nan() when NaN).
DSV4_HD float draw_logprob(float x, float top, double log_normalizer) {
  const double v = draw_add(draw_add(static_cast<double>(x), -static_cast<double>(top)), -log_normalizer);
  return v == v ? static_cast<float>(v) : draw_nan();
}

// Row `x[0, cols)`'s logprobs for token `id` (host reference, sequential): its logprob, its rank
// (1 + the tokens of larger logit) and the first `top_n` tokens by logit (ties: the lower id; NaN
// never) with theirs. Logprobs are draw_nan() in a row without a finite largest logit.
struct RowLogprobs {
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};
RowLogprobs draw_row_logprobs(const float* x, int64_t cols, int32_t id, int32_t top_n);

// The token this header's draw picks from x[0, n) (the host reference, sequential); -1 when no
// token can be drawn (no finite largest logit). n must be in (0, kDrawMaxVocab].
int32_t draw_token(const float* x, int64_t n, const DrawRow& row);

}  // namespace dsv4
