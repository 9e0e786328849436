// The CPU backend's fast fake-quantisers must equal core/quant.h's bit for bit: at every e4m3
// and e2m1 grid value, at every tie between neighbours and just beside it, and on random blocks
// spanning many magnitudes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/fast_quant.h"
#include "core/quant.h"
#include "cpu_test_util.h"

namespace dsv4::cpu {
namespace {

using dsv4::testing::same_bits;

TEST(FastQuant, E4M3RoundingEqualsEncodeDecodeAtEveryTie) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c)), hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    for (float v : {lo, hi, (lo + hi) / 2, std::nextafter((lo + hi) / 2, 0.0f), std::nextafter((lo + hi) / 2, 1e9f)})
      for (float s : {v, -v}) ASSERT_EQ(float_bits(round_e4m3_value(s)), float_bits(round_e4m3(s))) << s;
  }
  for (float v : {448.0f, 450.0f, 463.9f, 464.0f, 479.0f})
    EXPECT_EQ(round_e4m3_value(v), round_e4m3(v)) << v;
}

TEST(FastQuant, E2M1RoundingEqualsEncodeDecodeAtEveryTie) {
  for (int c = 0; c < 7; ++c) {
    const float lo = e2m1_to_float(static_cast<uint8_t>(c)), hi = e2m1_to_float(static_cast<uint8_t>(c + 1));
    for (float v : {lo, hi, (lo + hi) / 2, std::nextafter((lo + hi) / 2, 0.0f), std::nextafter((lo + hi) / 2, 1e9f)})
      for (float s : {v, -v}) ASSERT_EQ(float_bits(round_e2m1_value(s)), float_bits(round_e2m1(s))) << s;
  }
  for (float v : {6.0f, 6.5f, 7.0f, 100.0f}) EXPECT_EQ(round_e2m1_value(v), round_e2m1(v)) << v;
}

TEST(FastQuant, BlocksEqualCoreQuantOverManyMagnitudes) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = trial % 2 ? 128 : 32;
    std::vector<float> x(static_cast<size_t>(n));
    const float scale = std::ldexp(1.0f, exponent(gen));
    for (float& v : x) v = normal(gen) * scale * (trial % 7 == 0 ? std::ldexp(1.0f, exponent(gen) / 4) : 1.0f);
    if (trial % 11 == 0) x[3] = 0;
    std::vector<float> fast8 = x, core8 = x, fast4 = x, core4 = x;
    fake_quant_e4m3(fast8.data(), n);
    fake_quant_block_e4m3(core8.data(), n);
    ASSERT_TRUE(same_bits(fast8, core8)) << "e4m3 trial " << trial;
    fake_quant_e2m1(fast4.data(), n);
    fake_quant_block_e2m1(core4.data(), n);
    ASSERT_TRUE(same_bits(fast4, core4)) << "e2m1 trial " << trial;
  }
}

}  // namespace
}  // namespace dsv4::cpu
