// kernels::bf16_mma_gemm (bf16 x bf16 on tensor cores with fp32 sums) against an fp64 host
// reference, and its summation-order contract: a row's result is the same bits whether it runs
// alone, in a batch of any size (any x tile) or as a slice of one, on either kernel, and the same
// bits again from kernels::bf16_wgmma_gemm (the prefill linears' WGMMA form).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/gemm/bf16_mma_gemm.h"
#include "kernels/gemm/f16_wgmma_gemm.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

// Random bf16 operands: x [m, ldx] (columns past k unused), w [n, k].
struct Operands {
  int64_t m, n, k, ldx;
  std::vector<uint16_t> x, w;
  DeviceBuffer<uint16_t> dx, dw;
  Operands(int64_t m_, int64_t n_, int64_t k_, int64_t ldx_, uint32_t seed)
      : m(m_), n(n_), k(k_), ldx(ldx_), x(static_cast<size_t>(m_ * ldx_)), w(static_cast<size_t>(n_ * k_)),
        dx(x.size()), dw(w.size()) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = float_to_bf16(normal(rng));
    for (auto& v : w) v = float_to_bf16(0.05f * normal(rng));
    dx.upload(x);
    dw.upload(w);
  }
  double x_at(int64_t r, int64_t i) const { return bf16_to_float(x[static_cast<size_t>(r * ldx + i)]); }
  double w_at(int64_t c, int64_t i) const { return bf16_to_float(w[static_cast<size_t>(c * k + i)]); }
  // Rows [row0, row0 + rows) into y (row stride n).
  kernels::Bf16MmaGemmParams params(int64_t row0, int64_t rows, float* y) const {
    return {dx.get() + row0 * ldx, ldx, dw.get(), {y + row0 * n, false}, n, rows, n, k, {}};
  }
};

struct Shape4 {
  int64_t m, n, k, ldx;
};

class Bf16MmaGemmCuda : public ::testing::TestWithParam<Shape4> {};

TEST_P(Bf16MmaGemmCuda, MatchesHostReferenceToFp32Accuracy) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k, ldx] = GetParam();
  const Operands ops(m, n, k, ldx, static_cast<uint32_t>(m * 7 + n * 3 + k));
  DeviceBuffer<float> dy(static_cast<size_t>(m * n));
  dy.poison();
  kernels::bf16_mma_gemm(ops.params(0, m, dy.get()), nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download();
  // fp32 sums of exact products: the error is a few fp32 ulps of the sum of |products|.
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double want = 0, magnitude = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double prod = ops.x_at(r, i) * ops.w_at(c, i);
        want += prod;
        magnitude += std::fabs(prod);
      }
      const double got = y[static_cast<size_t>(r * n + c)];
      ASSERT_LE(std::fabs(got - want), 1e-6 * magnitude)
          << "y[" << r << ", " << c << "] = " << got << ", want " << want << " (sum |products| " << magnitude << ")";
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16MmaGemmCuda,
                         ::testing::Values(Shape4{1, 256, 4096, 4096}, Shape4{7, 200, 384, 392},
                                           Shape4{16, 1032, 1024, 1024}, Shape4{33, 136, 640, 648},
                                           Shape4{100, 520, 2048, 2048},
                                           // 64 row blocks of 33 K blocks: the split kernel's last grid
                                           Shape4{5, 1024, 4224, 4224}),
                         [](const auto& info) {
                           return "m" + std::to_string(info.param.m) + "_n" + std::to_string(info.param.n) + "_k" +
                                  std::to_string(info.param.k) + "_ldx" + std::to_string(info.param.ldx);
                         });

// Alone, a row runs on the split kernel (8-row tiles, grids of up to 64 blocks); in the whole
// batch on 32-row tiles, in 13-row slices on 16-row tiles.
class Bf16MmaGemmCudaOrder : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(Bf16MmaGemmCudaOrder, RowsAreTheSameBitsAloneAndInAnyBatch) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 77;
  const auto [n, k] = GetParam();
  const Operands ops(m, n, k, k, 5);
  const size_t size = static_cast<size_t>(m * n);
  DeviceBuffer<float> batched(size), alone(size), sliced(size);
  for (auto* b : {&batched, &alone, &sliced}) b->poison();
  kernels::bf16_mma_gemm(ops.params(0, m, batched.get()), nullptr);  // 32-row tiles
  for (int64_t r = 0; r < m; ++r) kernels::bf16_mma_gemm(ops.params(r, 1, alone.get()), nullptr);
  for (int64_t r = 0; r < m; r += 13)  // 13-row slices: 16-row tiles
    kernels::bf16_mma_gemm(ops.params(r, std::min<int64_t>(13, m - r), sliced.get()), nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> want = batched.download();
  for (const auto* got : {&alone, &sliced}) {
    const std::vector<float> y = got->download();
    for (size_t i = 0; i < size; ++i)
      ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
          << (got == &alone ? "alone" : "13-row slices") << ": y[" << i / n << ", " << i % n << "] = " << y[i]
          << ", batched " << want[i];
  }
}

// 9 K blocks (lanes of unequal length, one chunk of the split kernel); 33 (three chunks).
INSTANTIATE_TEST_SUITE_P(Shapes, Bf16MmaGemmCudaOrder,
                         ::testing::Values(std::pair<int64_t, int64_t>{264, 1152}, std::pair<int64_t, int64_t>{136, 4224}),
                         [](const auto& info) {
                           return "n" + std::to_string(info.param.first) + "_k" + std::to_string(info.param.second);
                         });

// y of p forced onto `kernel`, as bytes: rows x ldy elements of fp32 or bf16, poisoned first.
std::vector<uint8_t> run_forced(kernels::Bf16MmaGemmParams p, kernels::Bf16MmaKernel kernel, int64_t rows, bool bf16) {
  const size_t bytes = static_cast<size_t>(rows * p.ldy) * (bf16 ? 2 : 4);
  DeviceBuffer<uint8_t> y(bytes);
  y.poison();
  p.y = {y.get(), bf16};
  p.kernel = kernel;
  kernels::bf16_mma_gemm(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

class Bf16MmaGemmCudaStaged : public ::testing::TestWithParam<Shape4> {};

// y of p on bf16_wgmma_gemm (x and w re-laid by bf16_to_mma_order first), as run_forced gives it.
std::vector<uint8_t> run_wgmma(const kernels::Bf16MmaGemmParams& p, int64_t rows, bool bf16) {
  DeviceBuffer<uint8_t> y(static_cast<size_t>(rows * p.ldy) * (bf16 ? 2 : 4));
  DeviceBuffer<uint16_t> x_mma(static_cast<size_t>(p.m * p.k)), w_mma(static_cast<size_t>(p.n * p.k));
  y.poison();
  kernels::bf16_to_mma_order(p.x, p.ldx, x_mma.get(), p.m, p.k, nullptr);
  kernels::bf16_to_mma_order(p.w, p.k, w_mma.get(), p.n, p.k, nullptr);
  kernels::bf16_wgmma_gemm(x_mma.get(), w_mma.get(), {y.get(), bf16}, p.ldy, p.m, p.n, p.k, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

// The staged kernel, and the WGMMA one, give the streamed kernel's bits in fp32 and bf16, and
// write nothing outside [m, n] (3 spare columns and a spare row keep their poison in all three).
TEST_P(Bf16MmaGemmCudaStaged, SameBitsAsStreamed) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k, ldx] = GetParam();
  const Operands ops(m, n, k, ldx, static_cast<uint32_t>(m * 5 + n * 11 + k));
  kernels::Bf16MmaGemmParams p = ops.params(0, m, nullptr);
  p.ldy = n + 3;
  for (const bool bf16 : {false, true}) {
    const std::vector<uint8_t> streamed = run_forced(p, kernels::Bf16MmaKernel::kStreamed, m + 1, bf16);
    const std::pair<const char*, std::vector<uint8_t>> others[] = {
        {"staged", run_forced(p, kernels::Bf16MmaKernel::kStaged, m + 1, bf16)}, {"wgmma", run_wgmma(p, m + 1, bf16)}};
    for (const auto& [name, got] : others) {
      ASSERT_EQ(got.size(), streamed.size());
      const size_t elem = bf16 ? 2 : 4;
      for (size_t i = 0; i < got.size(); i += elem)
        ASSERT_EQ(std::memcmp(&got[i], &streamed[i], elem), 0)
            << (bf16 ? "bf16" : "fp32") << " y[" << i / elem / p.ldy << ", " << i / elem % p.ldy << "]: " << name
            << " and streamed kernels differ";
    }
  }
}

// Partial tiles in both directions, 1 to 33 K blocks (passes of unequal length, empty ones), x
// with a wider row stride; the 64-row x tiles (up to 64 rows) and the 128-row ones.
INSTANTIATE_TEST_SUITE_P(Shapes, Bf16MmaGemmCudaStaged,
                         ::testing::Values(Shape4{64, 136, 1152, 1160}, Shape4{300, 520, 1152, 1152},
                                           Shape4{129, 264, 128, 136}, Shape4{1000, 64, 4224, 4224},
                                           Shape4{77, 1032, 384, 392}, Shape4{256, 256, 512, 512},
                                           Shape4{40, 264, 640, 648}),
                         [](const auto& info) {
                           return "m" + std::to_string(info.param.m) + "_n" + std::to_string(info.param.n) + "_k" +
                                  std::to_string(info.param.k) + "_ldx" + std::to_string(info.param.ldx);
                         });

TEST(Bf16MmaGemmCudaOutput, ChoosesTheStagedKernelForPrefillSizes) {
  using kernels::Bf16MmaKernel;
  kernels::Bf16MmaGemmParams p;
  p.k = 4096;
  const auto dense = [&](int64_t m, int64_t n) {
    p.m = m;
    p.n = n;
    return kernels::bf16_mma_gemm_choice(p);
  };
  EXPECT_EQ(dense(1, 4096), Bf16MmaKernel::kStreamed);
  EXPECT_EQ(dense(63, 32768), Bf16MmaKernel::kStreamed);
  EXPECT_EQ(dense(64, 129280), Bf16MmaKernel::kStaged);   // the LM head at a decode batch of 64 (64-row tiles)
  EXPECT_EQ(dense(64, 4096), Bf16MmaKernel::kStreamed);   // 32 tiles
  EXPECT_EQ(dense(256, 2048), Bf16MmaKernel::kStreamed);  // 32 tiles of 128 x 128: too few for the GPU
  EXPECT_EQ(dense(8192, 64), Bf16MmaKernel::kStaged);     // the indexer's weights at an 8k prefill
  EXPECT_EQ(dense(8192, 256), Bf16MmaKernel::kStaged);    // the MoE gate
  p.second.n = 256;
  EXPECT_EQ(dense(8192, 256), Bf16MmaKernel::kStreamed);
  p.kernel = Bf16MmaKernel::kStaged;
  EXPECT_THROW(dense(8192, 256), UsageError);
  p.second.n = 0;
  EXPECT_EQ(dense(1, 16), Bf16MmaKernel::kStaged);
}

TEST(Bf16MmaGemmCudaOutput, Bf16IsTheRoundedFp32Output) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 5, n = 48, k = 256;
  const Operands ops(m, n, k, k, 9);
  DeviceBuffer<float> y32(static_cast<size_t>(m * n));
  DeviceBuffer<uint16_t> y16(static_cast<size_t>(m * n));
  kernels::bf16_mma_gemm(ops.params(0, m, y32.get()), nullptr);
  kernels::Bf16MmaGemmParams p = ops.params(0, m, nullptr);
  p.y = {y16.get(), true};
  kernels::bf16_mma_gemm(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> f = y32.download();
  const std::vector<uint16_t> h = y16.download();
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(h[i], float_to_bf16(f[i])) << "element " << i;
}

TEST(Bf16MmaGemmCudaOutput, RefusesKThatIsNotAMultipleOf128) {
  DSV4_SKIP_WITHOUT_GPU();
  const Operands ops(2, 16, 192, 192, 1);
  DeviceBuffer<float> y(32);
  EXPECT_FALSE(kernels::bf16_mma_gemm_supports(ops.params(0, 2, y.get())));
  EXPECT_THROW(kernels::bf16_mma_gemm(ops.params(0, 2, y.get()), nullptr), UsageError);
}

}  // namespace
}  // namespace dsv4
