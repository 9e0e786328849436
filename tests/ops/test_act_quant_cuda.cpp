// kernels::act_quant_fp8 against the CPU's quantisation (core/quant.h) bit for bit, its hardware
// e4m3 conversion against float_to_e4m3 over every float, and its fused sources and its fp16
// output against the kernels they replace, bit for bit: rows gathered through src_row or
// scattered through scatter_rows quantise as the gathered copy (kernels::gather_rows) would, a
// SwiGLU source as kernels::swiglu's bf16 output would (clamps, row weights, padding rows), and
// the fp16 output (q16) is e4m3_to_f16_mma_order of the codes, its bf16 form the codes' values
// times their scales, exactly, in the same order.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "core/quant.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "kernels/moe/expert_rows.h"
#include "kernels/moe/swiglu.h"
#include "tests/ops/cuda_test_util.h"
#include "tests/ops/cast_checks.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

std::vector<uint16_t> random_bf16(size_t n, float spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(normal(rng) * spread * static_cast<float>(1 + rng() % 4));
  return v;
}

// The codes and scales of act_quant_fp8(p) with p's outputs replaced by fresh (poisoned) buffers.
struct Quantised {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

Quantised quantise(kernels::ActQuantParams p) {
  DeviceBuffer<uint8_t> q(static_cast<size_t>(p.m_padded * p.k));
  DeviceBuffer<float> s(static_cast<size_t>(p.k / 128 * p.m_padded));
  q.poison();
  s.poison();
  p.q = q.get();
  p.scale = s.get();
  kernels::act_quant_fp8(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  return {q.download(), s.download()};
}

void expect_same(const Quantised& a, const Quantised& b) {
  ASSERT_EQ(a.codes.size(), b.codes.size());
  for (size_t i = 0; i < a.codes.size(); ++i) ASSERT_EQ(a.codes[i], b.codes[i]) << "code " << i;
  ASSERT_EQ(a.scales.size(), b.scales.size());
  for (size_t i = 0; i < a.scales.size(); ++i) ASSERT_EQ(a.scales[i], b.scales[i]) << "scale " << i;
}

// The hardware conversion act_quant_fp8 rounds with gives float_to_e4m3's code for every float, in
// either byte of the pair.
TEST(E4m3CastCuda, HardwareConversionGivesTheCpuCodeForEveryFloat) {
  DSV4_SKIP_WITHOUT_GPU();
  const testing::CastMismatches found = testing::e4m3_cast_mismatches();
  EXPECT_EQ(found.count, 0u) << "e.g. float bits 0x" << std::hex << found.first_bad;
}

// Codes and scales are core/quant.h's quantize_block_e4m3 of each 1 x 128 block, over values from
// 2^-40 to 2^20 (codes down to e4m3's subnormals and zero), a block under the amax floor, and
// blocks holding a NaN or an infinity.
TEST(ActQuantCuda, CodesAndScalesAreTheCpuQuantisation) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 37, k = 512;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const int spread = static_cast<int>(rng() % 60) - 40;  // a value's own magnitude, 2^-40 .. 2^19
      x[static_cast<size_t>(r * k + c)] = float_to_bf16(std::ldexp(unit(rng), r == 3 ? -30 : spread));
    }
  x[5 * k + 7] = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  x[9 * k + 300] = float_to_bf16(-std::numeric_limits<float>::infinity());
  DeviceBuffer<uint16_t> dx(x.size());
  dx.upload(x);
  const Quantised got = quantise({dx.get(), nullptr, nullptr, m, m + 3, k});
  for (int64_t r = 0; r < m + 3; ++r)
    for (int64_t b = 0; b < k / 128; ++b) {
      float values[128];
      for (int i = 0; i < 128; ++i) values[i] = r < m ? bf16_to_float(x[static_cast<size_t>(r * k + b * 128 + i)]) : 0.0f;
      uint8_t codes[128];
      quantize_block_e4m3(values, 128, codes);
      float amax = 0.0f;
      for (const float v : values) amax = fmaxf(amax, fabsf(v));
      const float scale = r < m ? std::ldexp(1.0f, pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max)) : 1.0f;
      ASSERT_EQ(got.scales[static_cast<size_t>(b * (m + 3) + r)], scale) << "row " << r << " block " << b;
      for (int i = 0; i < 128; ++i)
        ASSERT_EQ(got.codes[static_cast<size_t>(r * k + b * 128 + i)], r < m ? codes[i] : 0)
            << "row " << r << " column " << b * 128 + i << " value " << values[i];
    }
}

TEST(ActQuantCuda, GatheredRowsQuantiseAsTheGatheredCopy) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t tokens = 5, k = 512, m = 7, m_padded = 9;
  const std::vector<int32_t> src = {3, 0, 3, 4, 1, 2, 0};
  DeviceBuffer<uint16_t> x(static_cast<size_t>(tokens * k)), gathered(static_cast<size_t>(m * k));
  DeviceBuffer<int32_t> rows(src.size());
  x.upload(random_bf16(x.size(), 1.0f, 1));
  rows.upload(src);
  kernels::gather_rows({x.get(), rows.get(), gathered.get(), m, k * 2}, nullptr);
  const Quantised copied = quantise({gathered.get(), nullptr, nullptr, m, m_padded, k});
  kernels::ActQuantParams p{x.get(), nullptr, nullptr, m, m_padded, k};
  p.src_row = rows.get();
  expect_same(quantise(p), copied);
}

// Each of 5 tokens to 3 of 15 rows (the MoE's (token, slot) pairs to their expert-grouped rows),
// padded to 17: the rows the gathered copy of the same tokens quantises to.
TEST(ActQuantCuda, ScatteredRowsQuantiseAsTheGatheredCopy) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t tokens = 5, fanout = 3, k = 512, m = tokens * fanout, m_padded = 17;
  const std::vector<int32_t> dest = {4, 0, 11, 7, 1, 14, 2, 9, 5, 13, 6, 3, 8, 12, 10};  // row of (token, slot)
  std::vector<int32_t> src(static_cast<size_t>(m));
  for (size_t pair = 0; pair < dest.size(); ++pair)
    src[static_cast<size_t>(dest[pair])] = static_cast<int32_t>(pair / fanout);
  DeviceBuffer<uint16_t> x(static_cast<size_t>(tokens * k)), gathered(static_cast<size_t>(m * k));
  DeviceBuffer<int32_t> src_rows(src.size()), dest_rows(dest.size());
  x.upload(random_bf16(x.size(), 1.0f, 1));
  src_rows.upload(src);
  dest_rows.upload(dest);
  kernels::gather_rows({x.get(), src_rows.get(), gathered.get(), m, k * 2}, nullptr);
  const Quantised copied = quantise({gathered.get(), nullptr, nullptr, m, m_padded, k});
  kernels::ActQuantParams p{x.get(), nullptr, nullptr, m, m_padded, k};
  p.scatter_rows = dest_rows.get();
  p.scatter_fanout = fanout;
  expect_same(quantise(p), copied);
  kernels::ActQuantParams uneven = p;
  uneven.scatter_fanout = 4;  // 15 rows are not whole tokens of 4
  EXPECT_THROW(kernels::act_quant_fp8(uneven, nullptr), UsageError);
}

// swiglu into bf16 h, then act_quant of h; against the SwiGLU source. Values up to ~12 meet the
// limit of 7 on both sides.
void check_swiglu_source(bool row_weights, float limit) {
  const int64_t m = 6, m_padded = 8, k = 384;
  DeviceBuffer<uint16_t> gate(static_cast<size_t>(m * k)), up(static_cast<size_t>(m * k)), h(static_cast<size_t>(m * k));
  gate.upload(random_bf16(gate.size(), 3.0f, 2));
  up.upload(random_bf16(up.size(), 3.0f, 3));
  DeviceBuffer<float> weight(static_cast<size_t>(m));
  weight.upload({0.5f, 1.25f, 0.0f, 3.0f, 0.1f, 1.0f});
  const float* w = row_weights ? weight.get() : nullptr;
  kernels::swiglu({{gate.get(), true}, {up.get(), true}, w, {h.get(), true}, limit, m, k}, nullptr);
  const Quantised separate = quantise({h.get(), nullptr, nullptr, m, m_padded, k});
  kernels::ActQuantParams p{gate.get(), nullptr, nullptr, m, m_padded, k};
  p.swiglu_up = up.get();
  p.swiglu_row_weight = w;
  p.swiglu_limit = limit;
  expect_same(quantise(p), separate);
}

TEST(ActQuantCuda, SwigluSourceQuantisesAsSwigluThenQuantise) {
  DSV4_SKIP_WITHOUT_GPU();
  check_swiglu_source(true, 7.0f);
  check_swiglu_source(false, 7.0f);
  check_swiglu_source(true, 0.0f);
}

// q16: the same scales, and the codes as e4m3_to_f16_mma_order writes them, padding rows included.
TEST(ActQuantCuda, Fp16OutputIsTheCodesInTheF16WgmmaLayout) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 13, m_padded = 16, k = 640;
  DeviceBuffer<uint16_t> x(static_cast<size_t>(m * k));
  x.upload(random_bf16(x.size(), 2.0f, 4));
  const Quantised codes = quantise({x.get(), nullptr, nullptr, m, m_padded, k});
  DeviceBuffer<uint8_t> dcodes(codes.codes.size());
  dcodes.upload(codes.codes);
  DeviceBuffer<uint16_t> converted(codes.codes.size()), q16(codes.codes.size());
  kernels::e4m3_to_f16_mma_order(dcodes.get(), converted.get(), m_padded, k, nullptr);
  DeviceBuffer<float> scales(codes.scales.size());
  q16.poison();
  scales.poison();
  kernels::ActQuantParams p{x.get(), nullptr, scales.get(), m, m_padded, k};
  p.q16 = q16.get();
  kernels::act_quant_fp8(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> want = converted.download(), got = q16.download();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "fp16 value " << i;
  const std::vector<float> got_scales = scales.download();
  for (size_t i = 0; i < got_scales.size(); ++i) ASSERT_EQ(got_scales[i], codes.scales[i]) << "scale " << i;
}

// q16 with q16_bf16_scaled: each code's value times its block's scale as an exact bf16, at the
// position e4m3_to_f16_mma_order gives the code (32 t + 4 s + i of a block -> 16 s + 2 t + (i % 2) +
// 8 (i / 2)), or with q16_natural_order at the code's own, padding rows zero; the scales as ever.
// Values spread over 2^-12 .. 2^12, so that the scales take many exponents.
TEST(ActQuantCuda, Bf16ScaledOutputIsTheValuesInTheF16WgmmaLayoutOrXsOwn) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 13, m_padded = 16, k = 640;
  std::vector<uint16_t> host_x = random_bf16(static_cast<size_t>(m * k), 2.0f, 5);
  for (size_t i = 0; i < host_x.size(); ++i)
    host_x[i] = float_to_bf16(std::ldexp(bf16_to_float(host_x[i]), static_cast<int>((i / 128) % 25) - 12));
  DeviceBuffer<uint16_t> x(host_x.size());
  x.upload(host_x);
  const Quantised codes = quantise({x.get(), nullptr, nullptr, m, m_padded, k});
  for (const bool natural : {false, true}) {
    DeviceBuffer<uint16_t> q16(codes.codes.size());
    DeviceBuffer<float> scales(codes.scales.size());
    q16.poison();
    scales.poison();
    kernels::ActQuantParams p{x.get(), nullptr, scales.get(), m, m_padded, k};
    p.q16 = q16.get();
    p.q16_bf16_scaled = true;
    p.q16_natural_order = natural;
    kernels::act_quant_fp8(p, nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = q16.download();
    for (int64_t r = 0; r < m_padded; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const int64_t kb = c / 128, in_block = c % 128, t = in_block / 32, s4 = in_block % 32 / 4, i = in_block % 4;
        const int64_t at = natural ? r * k + c : r * k + kb * 128 + 16 * s4 + 2 * t + i % 2 + 8 * (i / 2);
        const double value = static_cast<double>(e4m3_to_float(codes.codes[static_cast<size_t>(r * k + c)])) *
                             codes.scales[static_cast<size_t>(kb * m_padded + r)];
        ASSERT_EQ(static_cast<double>(bf16_to_float(got[static_cast<size_t>(at)])), value)
            << (natural ? "x's own order" : "MMA order") << ", row " << r << ", input " << c << " (bf16 0x" << std::hex
            << got[static_cast<size_t>(at)] << ")";
      }
    const std::vector<float> got_scales = scales.download();
    for (size_t i = 0; i < got_scales.size(); ++i) ASSERT_EQ(got_scales[i], codes.scales[i]) << "scale " << i;
  }
}

}  // namespace
}  // namespace dsv4
