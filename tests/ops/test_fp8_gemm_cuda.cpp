// The FP8 block-scaled linear on the GPU (activation quantisation kernel + cuBLASLt) against
// the host: quantised activations and scales bit for bit, outputs within bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/fp8_gemm.h"
#include "core/numeric.h"
#include "core/quant.h"
#include "kernels/gemm/act_quant.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

using Shape3 = testing::GemmShape;

class Fp8GemmCuda : public ::testing::TestWithParam<Shape3> {};

TEST_P(Fp8GemmCuda, MatchesHostReference) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const int64_t mp = cuda::fp8_gemm_padded_m(m);
  std::mt19937 rng(static_cast<uint32_t>(m * 7 + n * 3 + k));
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = float_to_bf16(normal(rng) * (1 + (rng() % 4)));
  std::vector<uint8_t> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = float_to_e4m3(normal(rng) * 64.0f);
  const int64_t nb = (n + 127) / 128, kb = k / 128;
  std::vector<uint8_t> w_scale_e8m0(static_cast<size_t>(nb * kb));
  for (auto& v : w_scale_e8m0) v = static_cast<uint8_t>(118 + rng() % 6);

  // Host reference: the same 1x128 quantisation, then fp64 dot products of the dequantised values.
  std::vector<uint8_t> xq_ref(static_cast<size_t>(m * k));
  std::vector<float> xs_ref(static_cast<size_t>(m * kb));
  std::vector<float> row(128);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < kb; ++b) {
      for (int i = 0; i < 128; ++i) row[i] = bf16_to_float(x[r * k + b * 128 + i]);
      xs_ref[r * kb + b] = e8m0_to_float(quantize_block_e4m3(row.data(), 128, &xq_ref[r * k + b * 128]));
    }
  std::vector<float> x_deq(x.size()), w_deq(w.size());
  for (int64_t i = 0; i < m * k; ++i) x_deq[i] = e4m3_to_float(xq_ref[i]) * xs_ref[(i / k) * kb + (i % k) / 128];
  for (int64_t i = 0; i < n * k; ++i)
    w_deq[i] = e4m3_to_float(w[i]) * e8m0_to_float(w_scale_e8m0[(i / k / 128) * kb + (i % k) / 128]);
  // ref: exact (fp64) dot products; magnitude: sum of |products|, the scale accumulation errors grow with.
  std::vector<double> ref(static_cast<size_t>(m * n)), magnitude(ref.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double prod = static_cast<double>(x_deq[r * k + i]) * w_deq[c * k + i];
        acc += prod;
        mag += std::fabs(prod);
      }
      ref[r * n + c] = acc;
      magnitude[r * n + c] = mag;
    }

  DeviceBuffer<uint16_t> dx(x.size());
  DeviceBuffer<uint8_t> dxq(static_cast<size_t>(mp * k)), dw(w.size());
  DeviceBuffer<float> dxs(static_cast<size_t>(kb * mp));
  const std::vector<float> w_scale = cuda::fp8_weight_scales_for_cublaslt(w_scale_e8m0.data(), n, k);
  DeviceBuffer<float> dws(w_scale.size());
  DeviceBuffer<uint16_t> dout(static_cast<size_t>(mp * n));
  dx.upload(x);
  dw.upload(w);
  dws.upload(w_scale);
  dxq.poison();
  dxs.poison();
  dout.poison();

  kernels::act_quant_fp8({dx.get(), dxq.get(), dxs.get(), m, mp, k}, nullptr);
  cuda::Fp8BlockGemm gemm;
  gemm.run({dxq.get(), dxs.get(), dw.get(), dws.get(), dout.get(), mp, n, k}, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());

  const auto xq = dxq.download();
  const auto xs = dxs.download();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < kb; ++b)
      ASSERT_EQ(xs[b * mp + r], xs_ref[r * kb + b]) << "scale row " << r << " block " << b;
    for (int64_t i = 0; i < k; ++i) ASSERT_EQ(xq[r * k + i], xq_ref[r * k + i]) << "code [" << r << ", " << i << "]";
  }
  for (int64_t r = m; r < mp; ++r)
    for (int64_t i = 0; i < k; ++i) ASSERT_EQ(xq[r * k + i], 0) << "padding row " << r;

  // Hopper's FP8 tensor cores accumulate inside each 128-wide K block with less than fp32
  // precision, so the error bound scales with the sum of |products|, not with the result.
  const auto out = dout.download();
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const double got = bf16_to_float(out[r * n + c]), want = ref[r * n + c];
      ASSERT_LE(std::fabs(got - want), 4e-3 * std::fabs(want) + 1e-4 * magnitude[r * n + c])
          << "out[" << r << ", " << c << "] = " << got << ", want " << want << " (sum |products| "
          << magnitude[r * n + c] << ")";
      err2 += (got - want) * (got - want);
      ref2 += want * want;
    }
  EXPECT_LT(std::sqrt(err2 / ref2), 4e-3) << "relative Frobenius error";
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8GemmCuda,
                         ::testing::Values(Shape3{1, 256, 512}, Shape3{16, 512, 1024}, Shape3{33, 200, 384},
                                           Shape3{100, 1536, 4096}, Shape3{7, 4096, 7168}),
                         testing::gemm_shape_name);

TEST(Fp8GemmCuda, PaddedM) {
  EXPECT_EQ(cuda::fp8_gemm_padded_m(1), 16);
  EXPECT_EQ(cuda::fp8_gemm_padded_m(16), 16);
  EXPECT_EQ(cuda::fp8_gemm_padded_m(17), 20);
  EXPECT_EQ(cuda::fp8_gemm_padded_m(33), 36);
}

TEST(Fp8GemmCuda, WeightScaleRelayoutPadsKBlocksToFour) {
  const std::vector<uint8_t> s = {127, 128, 129, 130, 131, 132};  // [2, 3] for n=200, k=384
  const auto f = cuda::fp8_weight_scales_for_cublaslt(s.data(), 200, 384);
  ASSERT_EQ(f.size(), 8u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[2], 4.0f);
  EXPECT_EQ(f[3], 1.0f);  // padding
  EXPECT_EQ(f[4], 8.0f);
  EXPECT_EQ(f[6], 32.0f);
}

}  // namespace
}  // namespace dsv4
