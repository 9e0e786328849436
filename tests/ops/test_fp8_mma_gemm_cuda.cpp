// kernels::fp8_mma_gemm (FP8 block-scaled GEMM on fp16 tensor cores with fp32 sums) against an
// fp64 host reference of the dequantised values, and its summation-order contract: a row's
// result is the same bits whether it runs alone, in any batch, or as a tile of a grouped GEMM.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/fp8_gemm.h"
#include "core/numeric.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

// Random FP8 operands on the device: x [m, k] quantised by act_quant_fp8 (scales [k/128, m]),
// `groups` weights [n, k] with e8m0 block scales in the kernels' fp32 layout.
struct Operands {
  int64_t m, n, k, groups;
  std::vector<uint8_t> xq, w;        // host copies of the codes
  std::vector<float> xs, ws;         // host copies of the scales
  int64_t ws_ld = 0, ws_group = 0;   // scale row stride, scales per group
  DeviceBuffer<uint8_t> dxq, dw;
  DeviceBuffer<float> dxs, dws;

  Operands(int64_t m_, int64_t n_, int64_t k_, int64_t groups_, uint32_t seed)
      : m(m_), n(n_), k(k_), groups(groups_), dxq(static_cast<size_t>(m_ * k_)), dw(static_cast<size_t>(groups_ * n_ * k_)),
        dxs(static_cast<size_t>(k_ / 128 * m_)),
        dws(static_cast<size_t>(groups_ * ((n_ + 127) / 128) * ((k_ / 128 + 3) / 4 * 4))) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> x(static_cast<size_t>(m * k));
    for (auto& v : x) v = float_to_bf16(normal(rng) * static_cast<float>(1 + rng() % 4));
    DeviceBuffer<uint16_t> dx(x.size());
    dx.upload(x);
    kernels::act_quant_fp8({dx.get(), dxq.get(), dxs.get(), m, m, k}, nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    xq = dxq.download();
    xs = dxs.download();

    w.resize(static_cast<size_t>(groups * n * k));
    for (auto& v : w) v = float_to_e4m3(normal(rng) * 64.0f);
    const int64_t nb = (n + 127) / 128, kb = k / 128;
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<uint8_t> e8m0(static_cast<size_t>(nb * kb));
      for (auto& v : e8m0) v = static_cast<uint8_t>(118 + rng() % 6);
      const std::vector<float> s = cuda::fp8_weight_scales_for_cublaslt(e8m0.data(), n, k);
      ws_group = static_cast<int64_t>(s.size());
      ws.insert(ws.end(), s.begin(), s.end());
    }
    ws_ld = ws_group / nb;
    dw.upload(w);
    dws.upload(ws);
  }

  double x_at(int64_t r, int64_t i) const { return e4m3_to_float(xq[r * k + i]) * double(xs[(i / 128) * m + r]); }
  double w_at(int64_t g, int64_t c, int64_t i) const {
    return e4m3_to_float(w[(g * n + c) * k + i]) * double(ws[g * ws_group + (c / 128) * ws_ld + i / 128]);
  }

  // A dense call over x rows [r0, r0 + rows) and group g's weight into y (rows with stride n).
  kernels::Fp8MmaGemmParams dense(int64_t r0, int64_t rows, int64_t g, float* y) const {
    kernels::Fp8MmaGemmParams p;
    p.x = dxq.get() + r0 * k;
    p.x_scale = dxs.get() + r0;
    p.x_scale_ld = m;
    p.w = dw.get() + g * n * k;
    p.w_scale = dws.get() + g * ws_group;
    p.w_scale_ld = ws_ld;
    p.y = {y + r0 * n, false};
    p.ldy = n;
    p.m = rows;
    p.n = n;
    p.k = k;
    return p;
  }
};

struct Shape3 {
  int64_t m, n, k;
};

void PrintTo(const Shape3& s, std::ostream* os) { *os << "m=" << s.m << " n=" << s.n << " k=" << s.k; }

class Fp8MmaGemmCuda : public ::testing::TestWithParam<Shape3> {};

TEST_P(Fp8MmaGemmCuda, MatchesHostReferenceToFp32Accuracy) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const Operands ops(m, n, k, 1, static_cast<uint32_t>(m * 7 + n * 3 + k));
  DeviceBuffer<float> dy(static_cast<size_t>(m * n));
  dy.poison();
  kernels::fp8_mma_gemm(ops.dense(0, m, 0, dy.get()), nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download();
  // fp32 sums of exact products: the error is a few fp32 ulps of the sum of |products|.
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double want = 0, magnitude = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double prod = ops.x_at(r, i) * ops.w_at(0, c, i);
        want += prod;
        magnitude += std::fabs(prod);
      }
      const double got = y[r * n + c];
      ASSERT_LE(std::fabs(got - want), 1e-6 * magnitude)
          << "y[" << r << ", " << c << "] = " << got << ", want " << want << " (sum |products| " << magnitude << ")";
      err2 += (got - want) * (got - want);
      ref2 += want * want;
    }
  const double rel = std::sqrt(err2 / ref2);
  std::printf("[measure] fp8_mma_gemm m=%lld n=%lld k=%lld: relative Frobenius error %.3e\n", static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k), rel);
  EXPECT_LT(rel, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8MmaGemmCuda,
                         ::testing::Values(Shape3{1, 256, 512}, Shape3{7, 200, 384}, Shape3{16, 512, 1024},
                                           Shape3{33, 136, 640}, Shape3{100, 1536, 4096}, Shape3{3, 4096, 7168}),
                         [](const auto& info) {
                           return "m" + std::to_string(info.param.m) + "_n" + std::to_string(info.param.n) +
                                  "_k" + std::to_string(info.param.k);
                         });

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Fp8MmaGemmCuda, RowsAreTheSameBitsAloneInAnyBatchAndGrouped) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 77, n = 264, k = 1152;
  const Operands ops(m, n, k, 3, 11);
  const size_t size = static_cast<size_t>(m * n);

  // Reference: rows in groups of the dense path, the whole batch at once per group.
  // Rows [0, 30) use weight 0, [30, 31) weight 1, [31, 77) weight 2.
  const int64_t begin[] = {0, 30, 31}, end[] = {30, 31, 77};
  DeviceBuffer<float> batched(size), alone(size), sliced(size), grouped(size);
  for (auto* b : {&batched, &alone, &sliced, &grouped})  // NaN: unwritten outputs show
    DSV4_CUDA_CHECK(cudaMemset(b->get(), 0xff, size * sizeof(float)));
  for (int g = 0; g < 3; ++g) {
    kernels::fp8_mma_gemm(ops.dense(begin[g], end[g] - begin[g], g, batched.get()), nullptr);
    for (int64_t r = begin[g]; r < end[g]; ++r) kernels::fp8_mma_gemm(ops.dense(r, 1, g, alone.get()), nullptr);
    // Uneven slices: 5, 12, 17, 29, ... rows, crossing every tile size.
    for (int64_t r = begin[g], len = 5; r < end[g]; r += len, len = len * 2 + 2)
      kernels::fp8_mma_gemm(ops.dense(r, std::min(len, end[g] - r), g, sliced.get()), nullptr);
  }

  // Grouped: tiles of at most 16 rows, built on the host, with a spare tile past tile_count.
  std::vector<kernels::Fp8MmaTile> tiles;
  for (int g = 0; g < 3; ++g)
    for (int64_t r = begin[g]; r < end[g]; r += 16)
      tiles.push_back({g, static_cast<int32_t>(r), static_cast<int32_t>(std::min<int64_t>(16, end[g] - r))});
  const int32_t count = static_cast<int32_t>(tiles.size());
  tiles.push_back({0, 0, 16});  // must not run: it would overwrite rows 0..15 with weight 0's
  DeviceBuffer<kernels::Fp8MmaTile> dtiles(tiles.size());
  dtiles.upload(tiles);
  DeviceBuffer<int32_t> dcount(1);
  dcount.upload({count});
  std::vector<const uint8_t*> w_of;
  std::vector<const float*> s_of;
  for (int g = 0; g < 3; ++g) {
    w_of.push_back(ops.dw.get() + g * n * k);
    s_of.push_back(ops.dws.get() + g * ops.ws_group);
  }
  DeviceBuffer<const uint8_t*> dw_of(3);
  DeviceBuffer<const float*> ds_of(3);
  dw_of.upload(w_of);
  ds_of.upload(s_of);
  kernels::Fp8MmaGemmParams p = ops.dense(0, m, 0, grouped.get());
  p.w = nullptr;
  p.w_scale = nullptr;
  p.tiles = dtiles.get();
  p.tile_count = dcount.get();
  p.max_tiles = static_cast<int64_t>(tiles.size());
  p.tile_rows = 16;
  p.group_w = dw_of.get();
  p.group_w_scale = ds_of.get();
  kernels::fp8_mma_gemm(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<float> ref = batched.download();
  for (float v : ref) ASSERT_TRUE(std::isfinite(v)) << "an output was not written";
  EXPECT_TRUE(same_bits(alone.download(), ref)) << "one row at a time";
  EXPECT_TRUE(same_bits(sliced.download(), ref)) << "uneven slices";
  EXPECT_TRUE(same_bits(grouped.download(), ref)) << "grouped tiles";
}

TEST(Fp8MmaGemmCuda, RejectsKNotAMultipleOf128) {
  kernels::Fp8MmaGemmParams p;
  p.m = 1;
  p.n = 16;
  p.k = 100;
  EXPECT_THROW(kernels::fp8_mma_gemm(p, nullptr), UsageError);
}

}  // namespace
}  // namespace dsv4
