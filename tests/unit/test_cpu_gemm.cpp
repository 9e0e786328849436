// The CPU backend's GEMM: each output row must not depend on the other rows or on how many there
// are (batch and chunk invariance), nor on the thread count; and it must be the right product.
#include <gtest/gtest.h>

#include "backend/cpu/gemm.h"
#include "cpu_test_util.h"

namespace dsv4::cpu {
namespace {

using dsv4::testing::random_floats;
using dsv4::testing::same_bits;

std::vector<float> product(ThreadPool& pool, const std::vector<float>& x, int64_t M, int64_t K,
                           const std::vector<float>& w, int64_t N) {
  std::vector<float> y(static_cast<size_t>(M * N));
  gemm_xwt(pool, x.data(), K, M, K, w.data(), N, y.data(), N);
  return y;
}

struct GemmShape {
  int64_t K, N;
};

class GemmRows : public ::testing::TestWithParam<GemmShape> {
 protected:
  void SetUp() override { configure_blas_threads(); }
};

TEST_P(GemmRows, EachRowIsTheSameAloneAsInAnyBatch) {
  const auto [K, N] = GetParam();
  ThreadPool pool(2);
  constexpr int64_t M = 37;
  const std::vector<float> x = random_floats(static_cast<size_t>(M * K), 1);
  const std::vector<float> w = random_floats(static_cast<size_t>(N * K), 2, 0.1f);
  const std::vector<float> all = product(pool, x, M, K, w, N);
  for (int64_t m : {0L, 1L, 7L, 8L, 9L, 20L, 36L}) {
    const std::vector<float> row(x.begin() + m * K, x.begin() + (m + 1) * K);
    const std::vector<float> alone = product(pool, row, 1, K, w, N);
    EXPECT_TRUE(same_bits(alone, {all.begin() + m * N, all.begin() + (m + 1) * N})) << "row " << m << " alone";
    // The same row as the last of a batch of a different size, behind other rows.
    std::vector<float> other = random_floats(static_cast<size_t>(12 * K), 3 + static_cast<uint32_t>(m));
    other.insert(other.end(), row.begin(), row.end());
    const std::vector<float> batch = product(pool, other, 13, K, w, N);
    EXPECT_TRUE(same_bits({batch.end() - N, batch.end()}, alone)) << "row " << m << " in another batch";
  }
}

TEST_P(GemmRows, ThreadCountDoesNotChangeBits) {
  const auto [K, N] = GetParam();
  constexpr int64_t M = 29;
  const std::vector<float> x = random_floats(static_cast<size_t>(M * K), 4);
  const std::vector<float> w = random_floats(static_cast<size_t>(N * K), 5, 0.1f);
  ThreadPool one(1), two(2), three(3);
  const std::vector<float> ref = product(one, x, M, K, w, N);
  EXPECT_TRUE(same_bits(product(two, x, M, K, w, N), ref));
  EXPECT_TRUE(same_bits(product(three, x, M, K, w, N), ref));
}

TEST_P(GemmRows, MatchesTheNaiveProduct) {
  const auto [K, N] = GetParam();
  ThreadPool pool(2);
  constexpr int64_t M = 11;
  const std::vector<float> x = random_floats(static_cast<size_t>(M * K), 6);
  const std::vector<float> w = random_floats(static_cast<size_t>(N * K), 7, 0.1f);
  const std::vector<float> y = product(pool, x, M, K, w, N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += static_cast<double>(x[m * K + k]) * w[n * K + k];
        mag += std::abs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      }
      ASSERT_NEAR(y[m * N + n], ref, 1e-6 * mag + 1e-30) << "m " << m << " n " << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmRows,
                         ::testing::Values(GemmShape{24, 3}, GemmShape{128, 24}, GemmShape{512, 256},
                                           GemmShape{512, 1000}, GemmShape{2048, 24}, GemmShape{300, 513}),
                         [](const auto& info) {
                           return "K" + std::to_string(info.param.K) + "_N" + std::to_string(info.param.N);
                         });

TEST(GemmRows, StridedInputAndOutput) {
  configure_blas_threads();
  ThreadPool pool(2);
  constexpr int64_t M = 10, K = 64, N = 40, ldx = 100, ldy = 50;
  const std::vector<float> x = random_floats(static_cast<size_t>(M * ldx), 8);
  const std::vector<float> w = random_floats(static_cast<size_t>(N * K), 9);
  std::vector<float> y(static_cast<size_t>(M * ldy), -7.0f);
  gemm_xwt(pool, x.data(), ldx, M, K, w.data(), N, y.data(), ldy);
  std::vector<float> dense(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) std::copy_n(x.begin() + m * ldx, K, dense.begin() + m * K);
  const std::vector<float> ref = product(pool, dense, M, K, w, N);
  for (int64_t m = 0; m < M; ++m) {
    EXPECT_TRUE(same_bits({y.begin() + m * ldy, y.begin() + m * ldy + N}, {ref.begin() + m * N, ref.begin() + (m + 1) * N}));
    EXPECT_EQ(y[m * ldy + N], -7.0f) << "wrote past the row's N columns";
  }
}

}  // namespace
}  // namespace dsv4::cpu
