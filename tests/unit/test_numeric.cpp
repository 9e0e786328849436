// Exhaustive checks of the narrow-format conversions: every e4m3 code and every tie between
// neighbours, all 16 e2m1 codes and their ties, e8m0 edge codes, bf16 rounding, block quant.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/numeric.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

bool is_e4m3_nan(uint8_t c) { return (c & 0x7f) == 0x7f; }

TEST(E4M3, DecodesEveryCodeToItsDefinition) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float v = e4m3_to_float(code);
    if (is_e4m3_nan(code)) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    const int e = (c >> 3) & 0xf, m = c & 7;
    const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    EXPECT_EQ(v, (c & 0x80) ? -mag : mag) << "code " << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(E4M3, EncodeOfDecodeIsIdentityForEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if (is_e4m3_nan(code)) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(code)), code) << "code " << c;
  }
}

// fp16 bits as a double (subnormals, NaN and infinities included).
double f16_bits_to_double(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m != 0 ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
  return sign * std::ldexp(static_cast<double>(1024 + m), e - 25);
}

TEST(E4M3, IntegerConversionToFp16IsExactForEveryPairOfCodes) {
  for (int c0 = 0; c0 < 256; ++c0)
    for (int c1 = 0; c1 < 256; ++c1) {
      const uint32_t spread = static_cast<uint32_t>(c1) << 24 | static_cast<uint32_t>(c0) << 8;
      const uint32_t halves = e4m3x2_spread_to_f16x2_over_256(spread);
      for (const auto& [code, h] : {std::pair{c0, static_cast<uint16_t>(halves)},
                                    std::pair{c1, static_cast<uint16_t>(halves >> 16)}}) {
        const double v = f16_bits_to_double(h);
        if (is_e4m3_nan(static_cast<uint8_t>(code))) {
          ASSERT_TRUE(std::isnan(v)) << "code " << code << " gave fp16 0x" << std::hex << h;
          continue;
        }
        ASSERT_EQ(v * 256.0, static_cast<double>(e4m3_to_float(static_cast<uint8_t>(code))))
            << "code " << code << " gave fp16 0x" << std::hex << h;
        ASSERT_EQ(h & 0x8000, (code & 0x80) << 8) << "code " << code << ": sign";
      }
    }
}

TEST(E4M3, EveryTieRoundsToTheEvenCode) {
  for (int c = 0; c < 0x7e; ++c) {  // positive neighbours (c, c+1), both finite
    const float lo = e4m3_to_float(static_cast<uint8_t>(c));
    const float hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact in float
    const uint8_t even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(float_to_e4m3(mid), even) << "tie between codes " << c << " and " << c + 1;
    EXPECT_EQ(float_to_e4m3(-mid), even | 0x80) << "negative tie " << c;
    // Just off the tie, the nearer neighbour wins.
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 1000.0f)), c + 1);
  }
}

TEST(E4M3, SaturatesAndKeepsNan) {
  EXPECT_EQ(float_to_e4m3(449.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(float_to_e4m3(-500.0f), 0xfe);
  EXPECT_TRUE(is_e4m3_nan(float_to_e4m3(NAN)));
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie with 0 -> even (0)
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.5f, -10)), 0x01);
}

TEST(E2M1, DecodesAllSixteenCodes) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    const float expect = (c & 8) ? -grid[c & 7] : grid[c & 7];
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), expect) << c;
    EXPECT_EQ(float_to_e2m1(expect), (c == 8 ? 8 : c)) << c;  // -0 keeps its sign bit
  }
}

TEST(E2M1, TiesGoToTheEvenCode) {
  const std::vector<std::pair<float, float>> ties = {
      {0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2}, {2.5f, 2}, {3.5f, 4}, {5.0f, 4}};
  for (auto [x, want] : ties) {
    EXPECT_EQ(round_e2m1(x), want) << x;
    EXPECT_EQ(round_e2m1(-x), -want) << -x;
  }
  EXPECT_EQ(round_e2m1(0.26f), 0.5f);
  EXPECT_EQ(round_e2m1(5.01f), 6.0f);
  EXPECT_EQ(round_e2m1(100.0f), 6.0f);
  EXPECT_EQ(round_e2m1(-INFINITY), -6.0f);
  EXPECT_EQ(round_e2m1(NAN), 0.0f);
}

TEST(E2M1, PackedPairsPutTheEvenElementLow) {
  const uint8_t b = pack_e2m1x2(0x3, 0xa);
  EXPECT_EQ(b, 0xa3);
  EXPECT_EQ(e2m1x2_low(b), 0x3);
  EXPECT_EQ(e2m1x2_high(b), 0xa);
}

TEST(E8M0, EdgeCodes) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(128), 2.0f);
  EXPECT_EQ(e8m0_to_float(126), 0.5f);
  EXPECT_EQ(e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_float(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
  for (int c = 1; c < 255; ++c)  // normal floats: the scale exponent reads back exactly
    EXPECT_EQ(ceil_log2(e8m0_to_float(static_cast<uint8_t>(c))), c - 127) << c;
}

TEST(E8M0, ExponentRoundTripAndClamp) {
  for (int e = -127; e <= 127; ++e)
    EXPECT_EQ(e8m0_to_float(e8m0_from_exponent(e)), std::ldexp(1.0f, e)) << e;
  EXPECT_EQ(e8m0_from_exponent(-300), 0);
  EXPECT_EQ(e8m0_from_exponent(300), 254);
}

TEST(CeilLog2, MatchesDefinition) {
  EXPECT_EQ(ceil_log2(1.0f), 0);
  EXPECT_EQ(ceil_log2(1.0000001f), 1);
  EXPECT_EQ(ceil_log2(0.75f), 0);
  EXPECT_EQ(ceil_log2(0.5f), -1);
  EXPECT_EQ(ceil_log2(448.0f), 9);
  EXPECT_EQ(pow2_scale_exponent(448.0f, kFp8AmaxFloor, kE4M3Max), 0);
  EXPECT_EQ(pow2_scale_exponent(449.0f, kFp8AmaxFloor, kE4M3Max), 1);
  EXPECT_EQ(pow2_scale_exponent(0.0f, kFp8AmaxFloor, kE4M3Max), ceil_log2(1e-4f / 448.0f));
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even).
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(INFINITY)), INFINITY);
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), b);
    }
  }
}

TEST(BlockQuant, E4M3BlockUsesPow2ScaleAndDequantisesClose) {
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = std::sin(0.37f * i) * 3.0f;
  std::vector<uint8_t> q(128);
  const uint8_t s = quantize_block_e4m3(x.data(), 128, q.data());
  const float scale = e8m0_to_float(s);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_LE(amax / scale, 448.0f);
  EXPECT_GT(amax / scale, 224.0f);  // the smallest pow2 that fits
  std::vector<float> fq = x;
  fake_quant_block_e4m3(fq.data(), 128);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(e4m3_to_float(q[i]) * scale, fq[i]);
    EXPECT_NEAR(fq[i], x[i], std::fabs(x[i]) * 0.0625f + 1e-6f);
  }
}

TEST(BlockQuant, E2M1BlockMatchesHandComputedValues) {
  // amax 3 -> scale 2^ceil(log2(3/6)) = 0.5; x/s = {6, -2.5, 1.5, 0.2} -> {6, -2, 1.5, 0}.
  float x[4] = {3.0f, -1.25f, 0.75f, 0.1f};
  uint8_t q[4];
  EXPECT_EQ(e8m0_to_float(quantize_block_e2m1(x, 4, q)), 0.5f);
  fake_quant_block_e2m1(x, 4);
  EXPECT_EQ(x[0], 3.0f);
  EXPECT_EQ(x[1], -1.0f);
  EXPECT_EQ(x[2], 0.75f);
  EXPECT_EQ(x[3], 0.0f);
}

}  // namespace
}  // namespace dsv4
