// kernels::fp4_gemv (MXFP4 weights as stored, activations from act_quant_fp8) against a float64
// sum over exactly the values the kernel reads: odd column counts, 1-8 rows, two K, and its
// argument checks. Skips where no GPU exists.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "cuda_test_util.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/fp4_gemv.h"

namespace dsv4::testing {
namespace {

TEST(Fp4GemvCuda, MatchesAFloat64SumOfTheQuantisedValues) {
  DSV4_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t k : {int64_t{2048}, int64_t{4096}}) {
    for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}}) {
      const int64_t n = 200, mp = 16;
      std::vector<uint16_t> x(static_cast<size_t>(m * k));
      for (auto& v : x) v = float_to_bf16(normal(rng) * 3.0f);
      std::vector<uint8_t> w(static_cast<size_t>(n * k / 2)), ws(static_cast<size_t>(n * k / 32));
      for (auto& b : w) b = static_cast<uint8_t>(rng() & 0xff);
      for (auto& s : ws) s = static_cast<uint8_t>(120 + rng() % 10);

      DeviceBuffer<uint16_t> dx(x.size()), dout(static_cast<size_t>(m * n));
      DeviceBuffer<uint8_t> dxq(static_cast<size_t>(mp * k)), dw(w.size()), dws(ws.size());
      DeviceBuffer<float> dxs(static_cast<size_t>(k / 128 * mp));
      dx.upload(x);
      dw.upload(w);
      dws.upload(ws);
      dout.poison();
      kernels::act_quant_fp8({dx.get(), dxq.get(), dxs.get(), m, mp, k}, nullptr);
      kernels::fp4_gemv({dxq.get(), dxs.get(), dw.get(), dws.get(), dout.get(), m, mp, n, k}, nullptr);
      const std::vector<uint16_t> got = dout.download();
      const std::vector<uint8_t> xq = dxq.download();
      const std::vector<float> xs = dxs.download();

      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
          double sum = 0, magnitude = 0;
          for (int64_t i = 0; i < k; ++i) {
            const uint8_t byte = w[static_cast<size_t>(c * k / 2 + i / 2)];
            const double wv = e2m1_to_float(i % 2 == 0 ? e2m1x2_low(byte) : e2m1x2_high(byte)) *
                              static_cast<double>(e8m0_to_float(ws[static_cast<size_t>(c * k / 32 + i / 32)]));
            const double xv = e4m3_to_float(xq[static_cast<size_t>(r * k + i)]) *
                              static_cast<double>(xs[static_cast<size_t>((i / 128) * mp + r)]);
            sum += xv * wv;
            magnitude += std::fabs(xv * wv);
          }
          const double g = bf16_to_float(got[static_cast<size_t>(r * n + c)]);
          // The final bf16 rounding (half an ulp, 2^-9 relative, with room), and the fp32 sums: a
          // 32-term chain per load, k/1024 loads per lane, a 5-level tree, each step within
          // 2^-24 of the sum of |terms| it adds: below 41 * 2^-24 = 2.4e-6 of the magnitude.
          const double bound = std::ldexp(std::fabs(sum), -8) + 4e-6 * magnitude + 1e-30;
          ASSERT_LE(std::fabs(g - sum), bound) << "k " << k << " m " << m << " row " << r << " col " << c;
        }
    }
  }
}

TEST(Fp4GemvCuda, RejectsShapesOutsideItsLimits) {
  DSV4_SKIP_WITHOUT_GPU();
  const kernels::Fp4GemvParams good{nullptr, nullptr, nullptr, nullptr, nullptr, 1, 16, 8, 1024};
  kernels::Fp4GemvParams p = good;
  p.m = kernels::kFp4GemvMaxRows + 1;
  EXPECT_THROW(kernels::fp4_gemv(p, nullptr), UsageError);
  p = good;
  p.k = 1536;
  EXPECT_THROW(kernels::fp4_gemv(p, nullptr), UsageError);
  p = good;
  p.m_padded = 0;
  EXPECT_THROW(kernels::fp4_gemv(p, nullptr), UsageError);
}

}  // namespace
}  // namespace dsv4::testing
