// The device runs core/numeric.h's roundings bit-identically to the host (the hardware bf16 pair
// conversion too, over every float), and the FP8 block-scaled dequantisation kernel matches the
// host formula. Skips where no GPU exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "kernels/convert.h"
#include "kernels/cuda_check.h"
#include "tests/ops/cast_checks.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

TEST(ConvertCuda, DeviceRoundingMatchesHostBitForBit) {
  DSV4_SKIP_WITHOUT_GPU();
  std::vector<float> x;
  for (int c = 0; c < 256; ++c) {  // every e4m3 value and every midpoint between neighbours
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) continue;
    x.push_back(v);
    x.push_back(std::nextafter(v, INFINITY));
    x.push_back(std::nextafter(v, -INFINITY));
    if (c + 1 < 256 && !std::isnan(e4m3_to_float(static_cast<uint8_t>(c + 1))))
      x.push_back((v + e4m3_to_float(static_cast<uint8_t>(c + 1))) / 2);
  }
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.5f, 1e30f, INFINITY, NAN})
    x.insert(x.end(), {t, -t});
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, sizeof f);
    x.push_back(f);
  }
  const auto n = static_cast<int64_t>(x.size());
  DeviceBuffer<float> dx(x.size());
  DeviceBuffer<uint8_t> d8(x.size()), d4(x.size());
  DeviceBuffer<uint16_t> d16(x.size());
  dx.upload(x);
  d8.poison();
  d4.poison();
  d16.poison();
  kernels::round_formats(dx.get(), d8.get(), d4.get(), d16.get(), n, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const auto e4m3 = d8.download();
  const auto e2m1 = d4.download();
  const auto bf16 = d16.download();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(e4m3[i], float_to_e4m3(x[i])) << "e4m3 of " << x[i] << " at " << i;
    ASSERT_EQ(e2m1[i], float_to_e2m1(x[i])) << "e2m1 of " << x[i] << " at " << i;
    ASSERT_EQ(bf16[i], float_to_bf16(x[i])) << "bf16 of " << x[i] << " at " << i;
  }
}

TEST(ConvertCuda, DequantFp8BlockMatchesHost) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t rows = 300, cols = 200;  // edges that are not multiples of 128
  const int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
  std::mt19937 rng(3);
  std::vector<uint8_t> w(rows * cols), s(srows * scols);
  for (auto& v : w) {
    v = static_cast<uint8_t>(rng());
    if ((v & 0x7f) == 0x7f) v = 0x10;  // no NaN codes
  }
  for (auto& v : s) v = static_cast<uint8_t>(120 + rng() % 16);
  DeviceBuffer<uint8_t> dw(w.size()), ds(s.size());
  DeviceBuffer<uint16_t> dout(w.size());
  dw.upload(w);
  ds.upload(s);
  dout.poison();
  kernels::dequant_fp8_block_to_bf16(dw.get(), ds.get(), dout.get(), rows, cols, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = dout.download();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float want = e4m3_to_float(w[r * cols + c]) * e8m0_to_float(s[(r / 128) * scols + c / 128]);
      ASSERT_EQ(out[r * cols + c], float_to_bf16(want)) << "at [" << r << ", " << c << "]";
    }
}

// The hardware conversion the kernels' paired bf16 stores round with (kernels/bf16_cast.cuh) gives
// float_to_bf16's bits for every float, in either half of the pair.
TEST(ConvertCuda, HardwareBf16PairGivesTheCpuBitsForEveryFloat) {
  DSV4_SKIP_WITHOUT_GPU();
  const testing::CastMismatches found = testing::bf16_cast_mismatches();
  EXPECT_EQ(found.count, 0u) << "e.g. float bits 0x" << std::hex << found.first_bad;
}

TEST(ConvertCuda, ErrorPathFailedCallsThrowCudaError) {
  DSV4_SKIP_WITHOUT_GPU();
  EXPECT_THROW(DSV4_CUDA_CHECK(cudaMemcpy(nullptr, reinterpret_cast<void*>(1), 16, cudaMemcpyDeviceToDevice)),
               CudaError);
  cudaGetLastError();  // the runtime remembers the error; clear it so later tests start clean
}

}  // namespace
}  // namespace dsv4
