// kernels::fp8_mma_gemm (FP8 block-scaled GEMM on fp16 tensor cores with fp32 sums) against an
// fp64 host reference of the dequantised values, and its summation-order contract: a row's
// result is the same bits whether it runs alone, in any batch, or as a tile of a grouped GEMM, and
// whichever of its two kernels (streamed, staged) computes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/fp8_gemm.h"
#include "core/numeric.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/e2m1_layout.h"
#include "kernels/gemm/f16_wgmma_gemm.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "loader/weights.h"
#include "tests/ops/chained_mma_reference.h"
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
  // y[r, c] against group 0's weight in fp64, and the sum of the products' magnitudes.
  struct Reference {
    double sum = 0, magnitude = 0;
  };
  Reference reference(int64_t r, int64_t c) const {
    Reference ref;
    for (int64_t i = 0; i < k; ++i) {
      const double prod = x_at(r, i) * w_at(0, c, i);
      ref.sum += prod;
      ref.magnitude += std::fabs(prod);
    }
    return ref;
  }

  // A dense call over x rows [r0, r0 + rows) and group g's weight, y not yet set (ldy = n).
  kernels::Fp8MmaGemmParams inputs(int64_t r0, int64_t rows, int64_t g) const {
    kernels::Fp8MmaGemmParams p;
    p.x = dxq.get() + r0 * k;
    p.x_scale = dxs.get() + r0;
    p.x_scale_ld = m;
    p.w = dw.get() + g * n * k;
    p.w_scale = dws.get() + g * ws_group;
    p.w_scale_ld = ws_ld;
    p.ldy = n;
    p.m = rows;
    p.n = n;
    p.k = k;
    return p;
  }

  // The same into fp32 y (rows with stride n), row r0 at y + r0 * n.
  kernels::Fp8MmaGemmParams dense(int64_t r0, int64_t rows, int64_t g, float* y) const {
    kernels::Fp8MmaGemmParams p = inputs(r0, rows, g);
    p.y = {y + r0 * n, false};
    return p;
  }
};

// A grouped call's tiles on the device: the list and the count of them that run (the first
// `live`; a list may hold spare tiles past them that must not run).
struct DeviceTiles {
  DeviceTiles(const std::vector<kernels::Fp8MmaTile>& tiles, int32_t live)
      : list(tiles.size()), count(1), size(static_cast<int64_t>(tiles.size())) {
    list.upload(tiles);
    count.upload({live});
  }
  DeviceBuffer<kernels::Fp8MmaTile> list;
  DeviceBuffer<int32_t> count;
  int64_t size;
};

// Tiles of up to tile_rows rows over the groups' rows [begin[g], begin[g + 1]), and past the live
// ones a spare tile that must not run (it would overwrite rows from 0 with group 0's weight).
DeviceTiles group_tiles(const std::vector<int64_t>& begin, int32_t tile_rows) {
  std::vector<kernels::Fp8MmaTile> tiles;
  for (size_t g = 0; g + 1 < begin.size(); ++g)
    for (int64_t r = begin[g]; r < begin[g + 1]; r += tile_rows)
      tiles.push_back({static_cast<int32_t>(g), static_cast<int32_t>(r),
                       static_cast<int32_t>(std::min<int64_t>(tile_rows, begin[g + 1] - r))});
  const auto live = static_cast<int32_t>(tiles.size());
  tiles.push_back({0, 0, tile_rows});
  return DeviceTiles(tiles, live);
}

// Dense call p made grouped over `tiles` of up to tile_rows rows: tile group g meets the weight,
// block scales (and, for e2m1 weights, shifts) of table entry g; p's dense weight pointers cleared.
kernels::Fp8MmaGemmParams grouped_params(kernels::Fp8MmaGemmParams p, const DeviceTiles& tiles, int32_t tile_rows,
                                         const uint8_t* const* w_of, const float* const* scale_of,
                                         const uint8_t* const* shift_of = nullptr) {
  p.w = nullptr;
  p.w_shift = nullptr;
  p.w_scale = nullptr;
  p.tiles = tiles.list.get();
  p.tile_count = tiles.count.get();
  p.max_tiles = tiles.size;
  p.tile_rows = tile_rows;
  p.group_w = w_of;
  p.group_w_scale = scale_of;
  p.group_w_shift = shift_of;
  return p;
}

using Shape3 = testing::GemmShape;

class Fp8MmaGemmCuda : public ::testing::TestWithParam<Shape3> {};

TEST_P(Fp8MmaGemmCuda, MatchesHostReferenceToFp32Accuracy) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const Operands ops(m, n, k, 1, static_cast<uint32_t>(m * 7 + n * 3 + k));
  DeviceBuffer<float> dy(static_cast<size_t>(m * n));
  dy.poison();
  const kernels::Fp8MmaGemmParams p = ops.dense(0, m, 0, dy.get());
  std::printf("[measure] fp8_mma_gemm m=%lld n=%lld k=%lld runs the %s kernel\n", static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k),
              kernels::fp8_mma_kernel_name(kernels::fp8_mma_gemm_choice(p)));
  kernels::fp8_mma_gemm(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download();
  // fp32 sums of exact products: the error is a few fp32 ulps of the sum of |products|.
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const auto [want, magnitude] = ops.reference(r, c);
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
                                           Shape3{33, 136, 640}, Shape3{100, 1536, 4096}, Shape3{3, 4096, 7168},
                                           Shape3{64, 8192, 256}),  // the last on the staged kernel
                         testing::gemm_shape_name);

// The WGMMA kernel (FP8 tensor cores, block sums promoted to fp32 every 128 K): not the other
// kernels' bits, so checked against the host's fp64 sums. Hopper's FP8 MMA keeps fewer bits inside
// a K block: measured on the H200, relative Frobenius errors 1.35e-4 .. 1.45e-4 on these shapes
// (the fp16-MMA kernels: ~1e-7), hence 2e-4.
TEST_P(Fp8MmaGemmCuda, WgmmaMatchesHostReferenceToItsBound) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const Operands ops(m, n, k, 1, static_cast<uint32_t>(m * 7 + n * 3 + k));
  DeviceBuffer<float> dy(static_cast<size_t>(m * n));
  dy.poison();
  kernels::Fp8MmaGemmParams p = ops.dense(0, m, 0, dy.get());
  p.kernel = kernels::Fp8MmaKernel::kWgmmaFp8;
  kernels::fp8_mma_gemm(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download();
  double err2 = 0, ref2 = 0, worst = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const auto [want, magnitude] = ops.reference(r, c);
      const double got = y[r * n + c];
      ASSERT_FALSE(std::isnan(got)) << "y[" << r << ", " << c << "] unwritten";
      worst = std::max(worst, std::fabs(got - want) / magnitude);
      err2 += (got - want) * (got - want);
      ref2 += want * want;
    }
  const double rel = std::sqrt(err2 / ref2);
  std::printf("[measure] wgmma fp8 m=%lld n=%lld k=%lld: relative Frobenius error %.3e, worst |err| / sum|products| %.3e\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), rel, worst);
  EXPECT_LT(rel, 2e-4);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// kWgmmaFp8's dense calls run on the persistent TMA-fed kernel (fp8_wgmma_dense_gemm) where x's
// scales' rows are a multiple of 4 apart, else on the cp.async kernel; the two must give the same
// bits: a row's result may not depend on how its batch's scales were padded. Shapes: partial x
// and weight tiles, more items than SMs (the persistent walk's later rounds), one K block, and
// K blocks odd (9, 3) and even (2, 8), which end the TMA kernel's two-accumulator walk differently.
TEST(Fp8MmaGemmCuda, WgmmaTmaKernelGivesTheCpAsyncKernelsBits) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const auto& [m, n, k] : {Shape3{200, 264, 1152}, Shape3{1024, 2304, 384}, Shape3{64, 8192, 256},
                                Shape3{4, 128, 128}, Shape3{300, 520, 1024}}) {
    SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
    const Operands ops(m, n, k, 1, static_cast<uint32_t>(m + n + k));
    const size_t size = static_cast<size_t>(m * n);
    DeviceBuffer<float> tma(size), cp_async(size);
    tma.poison();
    cp_async.poison();
    kernels::Fp8MmaGemmParams p = ops.dense(0, m, 0, tma.get());
    p.kernel = kernels::Fp8MmaKernel::kWgmmaFp8;
    ASSERT_TRUE(kernels::fp8_wgmma_dense_takes(p));
    kernels::fp8_mma_gemm(p, nullptr);
    // The same scales with rows m + 1 apart, which TMA cannot take.
    const int64_t ld = m + 1;
    std::vector<float> xs(static_cast<size_t>(k / 128 * ld), 0.0f);
    for (int64_t b = 0; b < k / 128; ++b)
      for (int64_t r = 0; r < m; ++r) xs[b * ld + r] = ops.xs[b * m + r];
    DeviceBuffer<float> dxs(xs.size());
    dxs.upload(xs);
    kernels::Fp8MmaGemmParams q = ops.dense(0, m, 0, cp_async.get());
    q.kernel = kernels::Fp8MmaKernel::kWgmmaFp8;
    q.x_scale = dxs.get();
    q.x_scale_ld = ld;
    ASSERT_FALSE(kernels::fp8_wgmma_dense_takes(q));
    EXPECT_THROW(kernels::fp8_wgmma_dense_gemm(q, nullptr), UsageError);
    kernels::fp8_mma_gemm(q, nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> want = cp_async.download();
    for (float v : want) ASSERT_TRUE(std::isfinite(v)) << "an output was not written";
    EXPECT_TRUE(same_bits(tma.download(), want));
  }
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
  const DeviceTiles dtiles(tiles, count);
  // The weight tables twice over: a second output with group offset 3 meets the same weights.
  std::vector<const uint8_t*> w_of;
  std::vector<const float*> s_of;
  for (int copy = 0; copy < 2; ++copy)
    for (int g = 0; g < 3; ++g) {
      w_of.push_back(ops.dw.get() + g * n * k);
      s_of.push_back(ops.dws.get() + g * ops.ws_group);
    }
  DeviceBuffer<const uint8_t*> dw_of(w_of.size());
  DeviceBuffer<const float*> ds_of(s_of.size());
  dw_of.upload(w_of);
  ds_of.upload(s_of);
  const kernels::Fp8MmaGemmParams p =
      grouped_params(ops.dense(0, m, 0, grouped.get()), dtiles, 16, dw_of.get(), ds_of.get());
  kernels::fp8_mma_gemm(p, nullptr);
  // The same tiles with a second output in the launch (MoE gate and up): both get the bits.
  DeviceBuffer<float> first(size), second(size);
  for (auto* b : {&first, &second}) DSV4_CUDA_CHECK(cudaMemset(b->get(), 0xff, size * sizeof(float)));
  kernels::Fp8MmaGemmParams paired = p;
  paired.y = {first.get(), false};
  paired.second = {.w_scale_ld = p.w_scale_ld, .y = {second.get(), false}, .ldy = n, .n = n, .group_offset = 3};
  kernels::fp8_mma_gemm(paired, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<float> ref = batched.download();
  for (float v : ref) ASSERT_TRUE(std::isfinite(v)) << "an output was not written";
  EXPECT_TRUE(same_bits(alone.download(), ref)) << "one row at a time";
  EXPECT_TRUE(same_bits(sliced.download(), ref)) << "uneven slices";
  EXPECT_TRUE(same_bits(grouped.download(), ref)) << "grouped tiles";
  EXPECT_TRUE(same_bits(first.download(), ref)) << "grouped tiles, first of two outputs";
  EXPECT_TRUE(same_bits(second.download(), ref)) << "grouped tiles, second of two outputs";
}

// Runs p with `kernel` forced into a fresh y of `rows` x p.ldy elements (fp32, or bf16 when `bf16`)
// whose every byte starts as 0xff, and returns y's bytes.
std::vector<uint8_t> run_forced(kernels::Fp8MmaGemmParams p, kernels::Fp8MmaKernel kernel, int64_t rows, bool bf16) {
  const size_t bytes = static_cast<size_t>(rows * p.ldy) * (bf16 ? 2 : 4);
  DeviceBuffer<uint8_t> y(bytes);
  DSV4_CUDA_CHECK(cudaMemset(y.get(), 0xff, bytes));
  p.y = {y.get(), bf16};
  p.kernel = kernel;
  kernels::fp8_mma_gemm(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

// "" when got and want hold the same bytes, else the first element (row, column of ld-wide rows)
// where they differ with both values' bits and numbers.
std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int64_t ld, bool bf16) {
  if (got.size() != want.size())
    return "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  const size_t elem = bf16 ? 2 : 4;
  for (size_t i = 0; i < got.size(); i += elem) {
    if (std::memcmp(&got[i], &want[i], elem) == 0) continue;
    uint32_t g = 0, w = 0;
    std::memcpy(&g, &got[i], elem);
    std::memcpy(&w, &want[i], elem);
    const auto value = [&](uint32_t bits) {
      return bf16 ? bf16_to_float(static_cast<uint16_t>(bits)) : bits_float(bits);
    };
    const int64_t e = static_cast<int64_t>(i / elem);
    std::ostringstream os;
    os << "first difference at y[" << e / ld << ", " << e % ld << "] (element " << e << "): got 0x" << std::hex << g
       << " (" << std::dec << value(g) << "), want 0x" << std::hex << w << " (" << std::dec << value(w) << ")";
    return os.str();
  }
  return "";
}

// "" when y (run_forced's bytes: rows of ld fp32 or bf16 elements) has every element of its first m
// rows and n columns written (not all bytes 0xff) and every other element still all 0xff, else
// the first element that is not so.
std::string written_exactly(const std::vector<uint8_t>& y, int64_t m, int64_t n, int64_t ld, bool bf16) {
  const size_t elem = bf16 ? 2 : 4;
  for (size_t at = 0; at < y.size(); at += elem) {
    const int64_t r = static_cast<int64_t>(at / elem) / ld, c = static_cast<int64_t>(at / elem) % ld;
    const bool spare = r >= m || c >= n;
    bool all_ff = true;
    for (size_t b = 0; b < elem; ++b) all_ff = all_ff && y[at + b] == 0xff;
    if (all_ff != spare)
      return "y[" + std::to_string(r) + ", " + std::to_string(c) + "] " + (spare ? "written" : "not written");
  }
  return "";
}

class Fp8MmaGemmStagedCuda : public ::testing::TestWithParam<Shape3> {};

// Dense: the staged kernels (both conversion splits) give the streamed kernel's bits in fp32 and
// bf16; the streamed kernel writes every output and nothing outside [m, n] (y has 3 spare columns
// and a spare row, which must keep 0xff), so equal bytes say the same of the staged ones.
TEST_P(Fp8MmaGemmStagedCuda, SameBitsAsStreamedDense) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const Operands ops(m, n, k, 1, static_cast<uint32_t>(m * 5 + n * 11 + k));
  kernels::Fp8MmaGemmParams p = ops.inputs(0, m, 0);
  p.ldy = n + 3;
  for (const bool bf16 : {false, true}) {
    const std::vector<uint8_t> streamed = run_forced(p, kernels::Fp8MmaKernel::kStreamed, m + 1, bf16);
    for (const kernels::Fp8MmaKernel kernel : {kernels::Fp8MmaKernel::kStaged, kernels::Fp8MmaKernel::kStagedIntegerX})
      EXPECT_EQ(first_difference(run_forced(p, kernel, m + 1, bf16), streamed, p.ldy, bf16), "")
          << (bf16 ? "bf16" : "fp32") << " output, got = " << kernels::fp8_mma_kernel_name(kernel)
          << " kernel, want = streamed kernel";
    // The streamed kernel's own output: every element of [m, n] written, the spare ones not.
    ASSERT_EQ(written_exactly(streamed, m, n, p.ldy, bf16), "") << (bf16 ? "bf16" : "fp32") << " output";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp8MmaGemmStagedCuda,
    ::testing::Values(Shape3{64, 512, 1024}, Shape3{65, 1536, 2048}, Shape3{127, 2048, 1024},
                      Shape3{128, 4096, 4096}, Shape3{300, 520, 1152}, Shape3{512, 7168, 7168},
                      Shape3{1024, 1536, 4096}, Shape3{4096, 2048, 1024}, Shape3{4096, 4096, 7168},
                      Shape3{129, 4100, 2048}, Shape3{1000, 1544, 1024}, Shape3{77, 136, 384},
                      Shape3{200, 264, 128}, Shape3{5, 4096, 640},
                      // streamed on the piped kernel: 17 K blocks (4 stages), 33 (8 stages)
                      Shape3{5, 1032, 2176}, Shape3{8, 264, 4224}, Shape3{1, 136, 8192}),
    testing::gemm_shape_name);

// Grouped: the staged kernels over tiles of 128 rows and of 100 rows give the bits of the streamed
// kernel over tiles of 32 rows and of dense streamed calls per group, with groups of 1, 130, 0,
// 257, 64 and 128 rows (partial tiles), a ragged n and 9 K blocks; tiles past tile_count don't run.
TEST(Fp8MmaGemmStagedCuda, SameBitsAsStreamedGrouped) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t rows[] = {1, 130, 0, 257, 64, 128};
  const int groups = 6;
  std::vector<int64_t> begin(groups + 1, 0);
  for (int g = 0; g < groups; ++g) begin[g + 1] = begin[g] + rows[g];
  const int64_t m = begin[groups], n = 1032, k = 1152;
  const Operands ops(m, n, k, groups, 23);
  std::vector<const uint8_t*> w_of;
  std::vector<const float*> s_of;
  for (int g = 0; g < groups; ++g) {
    w_of.push_back(ops.dw.get() + g * n * k);
    s_of.push_back(ops.dws.get() + g * ops.ws_group);
  }
  DeviceBuffer<const uint8_t*> dw_of(groups);
  DeviceBuffer<const float*> ds_of(groups);
  dw_of.upload(w_of);
  ds_of.upload(s_of);

  for (const bool bf16 : {false, true}) {
    const size_t elem = bf16 ? 2 : 4, bytes = static_cast<size_t>(m * n) * elem;
    DeviceBuffer<uint8_t> dense(bytes);
    DSV4_CUDA_CHECK(cudaMemset(dense.get(), 0xff, bytes));
    for (int g = 0; g < groups; ++g) {
      kernels::Fp8MmaGemmParams d = ops.inputs(begin[g], rows[g], g);
      d.y = {dense.get() + static_cast<size_t>(begin[g] * n) * elem, bf16};
      d.kernel = kernels::Fp8MmaKernel::kStreamed;
      kernels::fp8_mma_gemm(d, nullptr);
    }
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> want = dense.download();

    for (const int32_t tile_rows : {32, 128, 100}) {
      const DeviceTiles dtiles = group_tiles(begin, tile_rows);
      kernels::Fp8MmaGemmParams p = grouped_params(ops.inputs(0, m, 0), dtiles, tile_rows, dw_of.get(), ds_of.get());
      const kernels::Fp8MmaKernel expected =
          tile_rows == 32 ? kernels::Fp8MmaKernel::kStreamed : kernels::Fp8MmaKernel::kStaged;
      EXPECT_EQ(kernels::fp8_mma_gemm_choice(p), expected) << "tile_rows " << tile_rows;
      std::vector<kernels::Fp8MmaKernel> kernels_to_run = {kernels::Fp8MmaKernel::kAuto};
      if (expected == kernels::Fp8MmaKernel::kStaged) kernels_to_run.push_back(kernels::Fp8MmaKernel::kStagedIntegerX);
      for (const kernels::Fp8MmaKernel kernel : kernels_to_run)
        EXPECT_EQ(first_difference(run_forced(p, kernel, m, bf16), want, n, bf16), "")
            << (bf16 ? "bf16" : "fp32") << " output, got = grouped tiles of " << tile_rows << " rows on the "
            << kernels::fp8_mma_kernel_name(kernel == kernels::Fp8MmaKernel::kAuto ? expected : kernel)
            << " kernel, want = dense streamed calls per group";
    }
  }
}

// A dense call's x and weight codes as e4m3_to_f16_mma_order writes them and x's scales copied to
// a row stride that is a multiple of 4 (TMA's 16-byte rule), set in `p` for a kF16Wgmma call.
struct F16Operands {
  explicit F16Operands(const kernels::Fp8MmaGemmParams& in)
      : x16(static_cast<size_t>(in.m * in.k)), w16(static_cast<size_t>(in.n * in.k)),
        xs(static_cast<size_t>((in.m + 3) / 4 * 4 * (in.k / 128))), p(in) {
    kernels::e4m3_to_f16_mma_order(in.x, x16.get(), in.m, in.k, nullptr);
    kernels::e4m3_to_f16_mma_order(in.w, w16.get(), in.n, in.k, nullptr);
    const int64_t ld = (in.m + 3) / 4 * 4;
    DSV4_CUDA_CHECK(cudaMemcpy2D(xs.get(), static_cast<size_t>(ld) * 4, in.x_scale, static_cast<size_t>(in.x_scale_ld) * 4,
                                 static_cast<size_t>(in.m) * 4, static_cast<size_t>(in.k / 128), cudaMemcpyDeviceToDevice));
    p.x16 = x16.get();
    p.w16 = w16.get();
    p.x_scale = xs.get();
    p.x_scale_ld = ld;
  }
  DeviceBuffer<uint16_t> x16, w16;
  DeviceBuffer<float> xs;
  kernels::Fp8MmaGemmParams p;
};

// NaN codes (0x7F, 0xFF) in x and in the weight: the outputs they reach are NaN, with the same bits
// from every kernel (the integer conversion's fp16 NaN differs from the conversion unit's, the
// MMA's and the fmaf's NaN results do not).
TEST(Fp8MmaGemmStagedCuda, NanCodesGiveTheSameBits) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 200, n = 300, k = 512;
  const Operands ops(m, n, k, 1, 31);
  std::vector<uint8_t> xq = ops.xq, w = ops.w;
  xq[5 * k + 17] = 0x7f;
  xq[130 * k + 300] = 0xff;
  w[7 * k + 100] = 0x7f;
  w[250 * k + 511] = 0xff;
  DeviceBuffer<uint8_t> dxq(xq.size()), dw(w.size());
  dxq.upload(xq);
  dw.upload(w);
  kernels::Fp8MmaGemmParams p = ops.inputs(0, m, 0);
  p.x = dxq.get();
  p.w = dw.get();
  for (const bool bf16 : {false, true}) {
    const std::vector<uint8_t> streamed = run_forced(p, kernels::Fp8MmaKernel::kStreamed, m, bf16);
    const size_t elem = bf16 ? 2 : 4;
    const auto is_nan = [&](int64_t r, int64_t c) {
      uint32_t bits = 0;
      std::memcpy(&bits, &streamed[static_cast<size_t>(r * n + c) * elem], elem);
      return bf16 ? std::isnan(bf16_to_float(static_cast<uint16_t>(bits))) : std::isnan(bits_float(bits));
    };
    ASSERT_TRUE(is_nan(5, 0) && is_nan(130, 299) && is_nan(0, 7) && is_nan(199, 250) && !is_nan(0, 0))
        << "the NaN codes should reach their rows and columns of y, and no others";
    for (const kernels::Fp8MmaKernel kernel : {kernels::Fp8MmaKernel::kStaged, kernels::Fp8MmaKernel::kStagedIntegerX})
      EXPECT_EQ(first_difference(run_forced(p, kernel, m, bf16), streamed, n, bf16), "")
          << (bf16 ? "bf16" : "fp32") << " output, got = " << kernels::fp8_mma_kernel_name(kernel)
          << " kernel, want = streamed kernel";
    const F16Operands f16(p);
    EXPECT_EQ(first_difference(run_forced(f16.p, kernels::Fp8MmaKernel::kF16Wgmma, m, bf16), streamed, n, bf16), "")
        << (bf16 ? "bf16" : "fp32") << " output, got = f16-wgmma kernel, want = streamed kernel";
  }
}

// ---- kF16Wgmma: the staged kernel's bits on WGMMA over operands converted to fp16 ---------------

class Fp8MmaGemmF16WgmmaCuda : public ::testing::TestWithParam<Shape3> {};

// Dense, fp32 and bf16 outputs with 3 spare columns and a spare row: the f16 WGMMA kernel's bytes
// are the staged kernel's (which SameBitsAsStreamedDense ties to the streamed kernel's, spares
// included), over ragged m, n and 1 to 56 K blocks, partial raster groups (m of 9 tiles) included.
TEST_P(Fp8MmaGemmF16WgmmaCuda, SameBitsAsStaged) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const Operands ops(m, n, k, 1, static_cast<uint32_t>(m * 7 + n * 3 + k));
  kernels::Fp8MmaGemmParams p = ops.inputs(0, m, 0);
  p.ldy = n + 3;
  const F16Operands f16(p);
  for (const bool bf16 : {false, true})
    EXPECT_EQ(first_difference(run_forced(f16.p, kernels::Fp8MmaKernel::kF16Wgmma, m + 1, bf16),
                               run_forced(p, kernels::Fp8MmaKernel::kStaged, m + 1, bf16), p.ldy, bf16),
              "")
        << (bf16 ? "bf16" : "fp32") << " output, got = f16-wgmma kernel, want = staged kernel";
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8MmaGemmF16WgmmaCuda,
                         ::testing::Values(Shape3{1, 136, 256}, Shape3{64, 512, 1024}, Shape3{65, 1536, 2048},
                                           Shape3{128, 4096, 4096}, Shape3{300, 520, 1152}, Shape3{77, 136, 384},
                                           Shape3{200, 264, 128}, Shape3{129, 4100, 2048}, Shape3{1100, 1544, 1024},
                                           Shape3{1024, 1536, 4096}, Shape3{512, 7168, 7168}),
                         testing::gemm_shape_name);

// e4m3_to_f16_mma_order: every output position holds the fp16 value of the code the layout names
// (code 32 t + 4 s + i of a block at 16 s + 2 t + (i % 2) + 8 (i / 2)), over all 256 codes.
TEST(E4m3ToF16MmaOrder, PlacesEveryCodeAtItsStepSlot) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t rows = 3, k = 384;
  std::vector<uint8_t> codes(static_cast<size_t>(rows * k));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 97 + i / 256) % 256);
  DeviceBuffer<uint8_t> dcodes(codes.size());
  DeviceBuffer<uint16_t> dout(codes.size());
  dcodes.upload(codes);
  kernels::e4m3_to_f16_mma_order(dcodes.get(), dout.get(), rows, k, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = dout.download();
  const auto fp16_value = [](uint16_t h) {  // fp16 bits -> float (exact)
    const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    const float magnitude = exponent == 0    ? std::ldexp(static_cast<float>(mantissa), -24)
                            : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                             : std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
    return (h & 0x8000) ? -magnitude : magnitude;
  };
  for (int64_t block = 0; block < rows * k / 128; ++block)
    for (int t = 0; t < 4; ++t)
      for (int s = 0; s < 8; ++s)
        for (int i = 0; i < 4; ++i) {
          const uint8_t code = codes[static_cast<size_t>(block * 128 + 32 * t + 4 * s + i)];
          const float got = fp16_value(out[static_cast<size_t>(block * 128 + 16 * s + 2 * t + i % 2 + 8 * (i / 2))]);
          const float want = e4m3_to_float(code);
          if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << "code 0x" << std::hex << int{code};
          else ASSERT_EQ(got, want) << "block " << block << " t " << t << " s " << s << " i " << i;
        }
}

// bf16_to_mma_order and e4m3_to_bf16_mma_order: the same positions, holding the bf16 value's bits
// as they were, and each code's value exactly as bf16.
TEST(ToBf16MmaOrder, PlacesEveryValueAtItsStepSlot) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t rows = 3, k = 384, n = rows * k;
  std::vector<uint16_t> x(static_cast<size_t>(n));
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<uint16_t>(i * 40503u + 17);
    codes[i] = static_cast<uint8_t>((i * 97 + i / 256) % 256);
  }
  DeviceBuffer<uint16_t> dx(x.size()), dx_out(x.size()), dw_out(x.size());
  DeviceBuffer<uint8_t> dcodes(codes.size());
  dx.upload(x);
  dcodes.upload(codes);
  kernels::bf16_to_mma_order(dx.get(), k, dx_out.get(), rows, k, nullptr);
  kernels::e4m3_to_bf16_mma_order(dcodes.get(), dw_out.get(), rows, k, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> x_out = dx_out.download(), w_out = dw_out.download();
  for (int64_t block = 0; block < n / 128; ++block)
    for (int t = 0; t < 4; ++t)
      for (int s = 0; s < 8; ++s)
        for (int i = 0; i < 4; ++i) {
          const auto from = static_cast<size_t>(block * 128 + 32 * t + 4 * s + i);
          const auto to = static_cast<size_t>(block * 128 + 16 * s + 2 * t + i % 2 + 8 * (i / 2));
          ASSERT_EQ(x_out[to], x[from]) << "bf16: block " << block << " t " << t << " s " << s << " i " << i;
          const float got = bf16_to_float(w_out[to]), want = e4m3_to_float(codes[from]);
          if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << "code 0x" << std::hex << int{codes[from]};
          else ASSERT_EQ(got, want) << "e4m3: block " << block << " t " << t << " s " << s << " i " << i;
        }
}

// What kF16Wgmma cannot take is refused by name before anything launches.
TEST(Fp8MmaGemmCuda, F16WgmmaRefusesWhatItCannotTake) {
  using kernels::Fp8MmaKernel;
  alignas(16) static uint16_t operand[8];
  alignas(16) static float scale[4];
  kernels::Fp8MmaGemmParams valid;
  valid.m = 300;
  valid.n = 512;
  valid.k = 1024;
  valid.x16 = operand;
  valid.w16 = operand;
  valid.x_scale = scale;
  valid.x_scale_ld = 300;
  valid.kernel = Fp8MmaKernel::kF16Wgmma;
  EXPECT_EQ(kernels::fp8_mma_gemm_choice(valid), Fp8MmaKernel::kF16Wgmma);
  const auto expect_refused = [](kernels::Fp8MmaGemmParams p, const char* what) {
    EXPECT_THROW(kernels::fp8_mma_gemm_choice(p), UsageError) << what;
    EXPECT_THROW(kernels::fp8_mma_gemm(p, nullptr), UsageError) << what;
  };
  kernels::Fp8MmaGemmParams p = valid;
  kernels::Fp8MmaTile tile;
  p.tiles = &tile;
  p.tile_rows = 128;
  expect_refused(p, "grouped e4m3 weights");
  p.w_codes = kernels::Fp8MmaWeightCodes::kE2M1;
  expect_refused(p, "grouped e2m1 weights with no tile count or tables");
  p = valid;
  p.w_codes = kernels::Fp8MmaWeightCodes::kE2M1;
  expect_refused(p, "dense e2m1 weights");
  p = valid;
  p.second.n = 16;
  expect_refused(p, "a second output");
  p = valid;
  p.x16 = nullptr;
  expect_refused(p, "no x16");
  p = valid;
  p.w16 = operand + 1;
  expect_refused(p, "w16 not 16-byte aligned");
  p = valid;
  p.x_scale_ld = 302;
  expect_refused(p, "x_scale_ld not a multiple of 4");
  p = valid;
  p.x_scale_ld = 296;
  expect_refused(p, "x_scale_ld under m");
  p = valid;
  p.kernel = Fp8MmaKernel::kAuto;
  EXPECT_NE(kernels::fp8_mma_gemm_choice(p), Fp8MmaKernel::kF16Wgmma) << "kAuto does not pick it";
}

TEST(Fp8MmaGemmCuda, ChoosesTheStagedKernelForPrefillSizes) {
  using kernels::Fp8MmaKernel;
  kernels::Fp8MmaGemmParams p;
  p.k = 4096;
  const auto dense = [&](int64_t m, int64_t n) {
    p.m = m;
    p.n = n;
    return kernels::fp8_mma_gemm_choice(p);
  };
  EXPECT_EQ(dense(1, 4096), Fp8MmaKernel::kStreamed);
  EXPECT_EQ(dense(63, 32768), Fp8MmaKernel::kStreamed);
  EXPECT_EQ(dense(64, 512), Fp8MmaKernel::kStreamed);  // 4 tiles of 128 x 128: too few for the GPU
  EXPECT_EQ(dense(64, 8192), Fp8MmaKernel::kStaged);
  EXPECT_EQ(dense(256, 2048), Fp8MmaKernel::kStreamed);  // 32 tiles
  EXPECT_EQ(dense(512, 1536), Fp8MmaKernel::kStaged);    // 48 tiles
  EXPECT_EQ(dense(4096, 1536), Fp8MmaKernel::kStaged);
  p.kernel = Fp8MmaKernel::kStaged;
  EXPECT_EQ(dense(1, 16), Fp8MmaKernel::kStaged);
  p.kernel = Fp8MmaKernel::kStagedIntegerX;
  EXPECT_EQ(dense(4096, 4096), Fp8MmaKernel::kStagedIntegerX);
  p.kernel = Fp8MmaKernel::kAuto;

  kernels::Fp8MmaTile tile;
  p.tiles = &tile;  // grouped: the choice reads tile_rows only
  for (const int32_t rows : {8, 16, 32}) {
    p.tile_rows = rows;
    EXPECT_EQ(kernels::fp8_mma_gemm_choice(p), Fp8MmaKernel::kStreamed) << rows;
  }
  for (const int32_t rows : {1, 64, 100, 128}) {
    p.tile_rows = rows;
    EXPECT_EQ(kernels::fp8_mma_gemm_choice(p), Fp8MmaKernel::kStaged) << rows;
  }
  p.tile_rows = 129;
  EXPECT_THROW(kernels::fp8_mma_gemm_choice(p), UsageError);
  p.tile_rows = 128;
  p.kernel = Fp8MmaKernel::kStreamed;
  EXPECT_THROW(kernels::fp8_mma_gemm_choice(p), UsageError);

  EXPECT_EQ(kernels::fp8_mma_tile_rows(1), 8);
  EXPECT_EQ(kernels::fp8_mma_tile_rows(63), 32);
  EXPECT_EQ(kernels::fp8_mma_tile_rows(64), kernels::kFp8MmaStagedTileRows);
}

TEST(Fp8MmaGemmCuda, RejectsKNotAMultipleOf128) {
  kernels::Fp8MmaGemmParams p;
  p.m = 1;
  p.n = 16;
  p.k = 100;
  EXPECT_THROW(kernels::fp8_mma_gemm(p, nullptr), UsageError);
}

// The streamed kernel counts a weight's rows in 32-bit units of K / 32 bytes: a call past that
// (here a second output of 2^30 rows x 8192) is refused before anything launches.
TEST(Fp8MmaGemmCuda, RejectsAWeightTooLargeForOneCall) {
  kernels::Fp8MmaGemmParams p;
  p.m = 1;
  p.n = 16;
  p.k = 8192;
  p.second.n = int64_t{1} << 30;
  EXPECT_THROW(kernels::fp8_mma_gemm(p, nullptr), UsageError);
  p.second.n = 16;
  p.n = int64_t{1} << 30;
  EXPECT_THROW(kernels::fp8_mma_gemm(p, nullptr), UsageError);
}

// ---- MXFP4 weights read as stored (Fp8MmaWeightCodes::kE2M1) --------------------------------

// e2m1_mma_order with the kernels' conversions (host code, no GPU needed): slot s of word w of
// each 16-byte group, as e2m1_slot_f16x2_bits gives it, is the fp16x2 of inputs 8w + 2s and
// 8w + 2s + 1 times 2^-14, and as e2m1_slot_bf16x2_bits gives it their bf16x2 times 2^-126, for
// every byte value.
TEST(E2m1MmaOrder, GivesEachSlotsPairAsFp16TimesTwoToTheMinus14AndBf16TimesTwoToTheMinus126) {
  const auto f16_value = [](uint32_t bits) {
    const uint32_t exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
    const double magnitude =
        exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, static_cast<int>(exponent) - 25);
    return (bits & 0x8000) != 0 ? -magnitude : magnitude;
  };
  const auto bf16_value = [](uint32_t bits) {
    const uint32_t exponent = (bits >> 7) & 0xFF, mantissa = bits & 0x7F;
    const double magnitude =
        exponent == 0 ? std::ldexp(mantissa, -133) : std::ldexp(128 + mantissa, static_cast<int>(exponent) - 134);
    return (bits & 0x8000) != 0 ? -magnitude : magnitude;
  };
  std::vector<uint8_t> stored(16 * 16);
  for (size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<uint8_t>(i * 37 + 11);  // every byte value
  std::vector<uint8_t> ordered(stored.size());
  kernels::e2m1_mma_order(stored.data(), ordered.data(), static_cast<int64_t>(stored.size()));
  bool seen[4][16] = {};
  for (size_t group = 0; group < stored.size() / 16; ++group) {
    const auto input = [&](int i) {
      return static_cast<uint8_t>((stored[group * 16 + static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 0xF);
    };
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
      std::memcpy(&word, &ordered[group * 16 + static_cast<size_t>(4 * w)], 4);
      for (int slot = 0; slot < 4; ++slot) {
        const uint32_t bits = kernels::e2m1_slot_f16x2_bits(word, slot);
        const uint8_t first = input(8 * w + 2 * slot), second = input(8 * w + 2 * slot + 1);
        const std::string where = "group " + std::to_string(group) + " word " + std::to_string(w) + " slot " +
                                  std::to_string(slot) + ", codes " + std::to_string(first) + ", " + std::to_string(second);
        EXPECT_EQ(f16_value(bits & 0xFFFF), std::ldexp(static_cast<double>(e2m1_to_float(first)), -14)) << where;
        EXPECT_EQ(f16_value(bits >> 16), std::ldexp(static_cast<double>(e2m1_to_float(second)), -14)) << where;
        EXPECT_EQ(bits & 0x8000, (first & 8u) << 12) << where;  // -0 keeps its sign
        const uint32_t b16 = kernels::e2m1_slot_bf16x2_bits(word, slot);
        EXPECT_EQ(bf16_value(b16 & 0xFFFF), std::ldexp(static_cast<double>(e2m1_to_float(first)), -126)) << where;
        EXPECT_EQ(bf16_value(b16 >> 16), std::ldexp(static_cast<double>(e2m1_to_float(second)), -126)) << where;
        EXPECT_EQ(b16 & 0x80008000u, (bits & 0x80008000u)) << where;
        seen[slot][first] = seen[slot][second] = true;
      }
    }
  }
  for (int slot = 0; slot < 4; ++slot)
    for (int code = 0; code < 16; ++code) EXPECT_TRUE(seen[slot][code]) << "slot " << slot << " code " << code;
  EXPECT_THROW(kernels::e2m1_mma_order(stored.data(), ordered.data(), 24), UsageError);
}

// The staged kernel's FP4 -> FP8 conversion (host code, no GPU needed): e2m1_word_to_e4m3 on the
// words of e2m1_mma_order with e2m1_magnitudes_as_e4m3 of the group's shift gives the loader's
// cast, for every e2m1 code at every input position of a word and every shift 0..6 (16 rows whose
// input i holds code (i + row) % 16; group g of row r has shift (4r + g) % 7).
TEST(E2m1ToE4m3, GivesTheLoadersCastForEveryCodeAndShift) {
  const int64_t rows = 16, cols = 128, groups = cols / 32;
  Tensor w(DType::kI8, {rows, cols / 2}), e8m0(DType::kF8E8M0, {rows, groups});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; i += 2)
      w.data<uint8_t>()[(r * cols + i) / 2] =
          pack_e2m1x2(static_cast<uint8_t>((i + r) % 16), static_cast<uint8_t>((i + 1 + r) % 16));
    for (int64_t g = 0; g < groups; ++g)
      e8m0.data<uint8_t>()[r * groups + g] = static_cast<uint8_t>(120 + (4 * r + g) % 7);  // block scale 120
  }
  const Fp8BlockWeight cast = cast_mxfp4_to_fp8(w.view(), e8m0.view(), "t");
  const Mxfp4BlockShifts shifts = mxfp4_block_shifts(w.view(), e8m0.view(), "t");
  std::vector<uint8_t> ordered(static_cast<size_t>(w.nbytes()));
  kernels::e2m1_mma_order(w.data<uint8_t>(), ordered.data(), static_cast<int64_t>(ordered.size()));
  bool seen[16][kMxfp4MaxShift + 1] = {};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t shift = shifts.shift.data<uint8_t>()[r * groups + g];
      ASSERT_EQ(shift, (4 * r + g) % 7);
      for (int64_t word = 0; word < 4; ++word) {
        uint32_t codes = 0;
        std::memcpy(&codes, &ordered[static_cast<size_t>((r * groups + g) * 16 + 4 * word)], 4);
        const kernels::E4m3x8 got = kernels::e2m1_word_to_e4m3(codes, kernels::e2m1_magnitudes_as_e4m3(shift));
        for (int j = 0; j < 8; ++j) {
          const int64_t input = 32 * g + 8 * word + j;
          const uint8_t e2m1 = static_cast<uint8_t>((input + r) % 16);
          const auto byte = static_cast<uint8_t>((j < 4 ? got.first : got.second) >> (8 * (j % 4)));
          EXPECT_EQ(byte, cast.weight.data<uint8_t>()[r * cols + input])
              << "row " << r << " input " << input << ": e2m1 code " << int(e2m1) << ", shift " << int(shift);
          seen[e2m1][shift] = true;
        }
      }
    }
  for (int code = 0; code < 16; ++code)
    for (int shift = 0; shift <= kMxfp4MaxShift; ++shift) EXPECT_TRUE(seen[code][shift]) << code << ", " << shift;
}

// e2m1_device_layout (host code, no GPU needed): row r's K block b is e2m1_mma_order of the
// checkpoint's 64 bytes at e2m1_row_codes_at(r) + b strides, its 4 shifts at e2m1_row_shifts_at(r)
// + b strides, every byte of both once (a weight of 37 rows: two whole tiles of 16 and 5 rows of a
// third, whose padding rows are zero); K not in blocks of 128 is refused.
TEST(E2m1DeviceLayout, PutsEachRowsKBlockInItsTileInTheMmaOrder) {
  const int64_t n = 37, k = 384, blocks = k / 128;
  std::vector<uint8_t> stored(static_cast<size_t>(n * k / 2)), shifts(static_cast<size_t>(n * k / 32));
  for (size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<uint8_t>(i * 29 + 3);
  for (size_t i = 0; i < shifts.size(); ++i) shifts[i] = static_cast<uint8_t>(1 + i % 251);  // never 0
  const kernels::E2m1DeviceWeight got = kernels::e2m1_device_layout(stored.data(), shifts.data(), n, k);
  const int64_t rows = kernels::e2m1_layout_rows(n);
  ASSERT_EQ(rows, 48);
  ASSERT_EQ(got.codes.size(), static_cast<size_t>(rows * k / 2));
  ASSERT_EQ(got.shifts.size(), static_cast<size_t>(rows * k / 32));
  std::vector<int> code_uses(got.codes.size()), shift_uses(got.shifts.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      std::vector<uint8_t> ordered(64);
      kernels::e2m1_mma_order(stored.data() + r * k / 2 + 64 * b, ordered.data(), 64);
      const int64_t codes_at = kernels::e2m1_row_codes_at(r, k) + b * kernels::kE2m1BlockCodeStride;
      const int64_t shifts_at = kernels::e2m1_row_shifts_at(r, k) + b * kernels::kE2m1BlockShiftStride;
      for (int64_t i = 0; i < 64; ++i) {
        EXPECT_EQ(got.codes[static_cast<size_t>(codes_at + i)], ordered[static_cast<size_t>(i)]) << r << ", " << b;
        ++code_uses[static_cast<size_t>(codes_at + i)];
      }
      for (int64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(got.shifts[static_cast<size_t>(shifts_at + i)], shifts[static_cast<size_t>(r * k / 32 + 4 * b + i)]);
        ++shift_uses[static_cast<size_t>(shifts_at + i)];
      }
    }
  // The real rows' bytes fill n x (k / 2) places once; the rest (padding) is zero.
  EXPECT_EQ(std::count(code_uses.begin(), code_uses.end(), 1), n * k / 2);
  EXPECT_EQ(std::count(code_uses.begin(), code_uses.end(), 0), (rows - n) * k / 2);
  EXPECT_EQ(std::count(shift_uses.begin(), shift_uses.end(), 1), n * k / 32);
  for (size_t i = 0; i < got.shifts.size(); ++i) {
    if (shift_uses[i] == 0) {
      EXPECT_EQ(got.shifts[i], 0) << i;
    }
  }
  EXPECT_THROW(kernels::e2m1_device_layout(stored.data(), shifts.data(), n, 320), UsageError);
}

// `groups` random MXFP4 weights [n, k] (every e2m1 byte, -0 included; per-32 scales within 2^6 of
// their 128x128 block's largest, as the lossless cast needs) on the device as the kE2M1 kernel
// reads them (e2m1_device_layout's codes and the cast's shifts) and as the cast's e4m3 codes,
// with the cast's block scales (one set for both) in the kernels' fp32 layout.
struct Fp4Weights {
  int64_t n, k, groups;
  int64_t layout_rows = kernels::e2m1_layout_rows(n);
  int64_t scale_group = 0, scale_ld = 0;
  DeviceBuffer<uint8_t> packed, shift, codes;
  DeviceBuffer<float> scale;

  Fp4Weights(int64_t n_, int64_t k_, int64_t groups_, uint32_t seed)
      : n(n_), k(k_), groups(groups_), packed(static_cast<size_t>(groups_ * kernels::e2m1_layout_rows(n_) * k_ / 2)),
        shift(static_cast<size_t>(groups_ * kernels::e2m1_layout_rows(n_) * k_ / 32)),
        codes(static_cast<size_t>(groups_ * n_ * k_)),
        scale(static_cast<size_t>(groups_ * ((n_ + 127) / 128) * ((k_ / 128 + 3) / 4 * 4))) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> all_packed, all_shift, all_codes;
    std::vector<float> all_scale;
    for (int64_t g = 0; g < groups; ++g) {
      Tensor w(DType::kI8, {n, k / 2}), e8m0(DType::kF8E8M0, {n, k / 32});
      for (uint8_t& b : w.span<uint8_t>()) b = static_cast<uint8_t>(rng());
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k / 32; ++c) {
          const uint32_t base = 118 + static_cast<uint32_t>((r / 128 * 7 + c / 4 * 3 + g) % 5);  // per block
          e8m0.data<uint8_t>()[r * (k / 32) + c] = static_cast<uint8_t>(base + rng() % (kMxfp4MaxShift + 1));
        }
      const Fp8BlockWeight cast = cast_mxfp4_to_fp8(w.view(), e8m0.view(), "fp4 test weight");
      const Mxfp4BlockShifts shifts = mxfp4_block_shifts(w.view(), e8m0.view(), "fp4 test weight");
      const std::vector<float> s = cuda::fp8_weight_scales_for_cublaslt(cast.scale.data<uint8_t>(), n, k);
      scale_group = static_cast<int64_t>(s.size());
      scale_ld = scale_group / ((n + 127) / 128);
      const kernels::E2m1DeviceWeight layout =
          kernels::e2m1_device_layout(w.data<uint8_t>(), shifts.shift.data<uint8_t>(), n, k);
      all_packed.insert(all_packed.end(), layout.codes.begin(), layout.codes.end());
      all_shift.insert(all_shift.end(), layout.shifts.begin(), layout.shifts.end());
      all_codes.insert(all_codes.end(), cast.weight.span<uint8_t>().begin(), cast.weight.span<uint8_t>().end());
      all_scale.insert(all_scale.end(), s.begin(), s.end());
    }
    packed.upload(all_packed);
    shift.upload(all_shift);
    codes.upload(all_codes);
    scale.upload(all_scale);
  }

  // x's operands with group g's weight, as the cast's codes or (e2m1) as stored.
  kernels::Fp8MmaGemmParams dense(const Operands& x, int64_t g, bool e2m1) const {
    kernels::Fp8MmaGemmParams p = x.inputs(0, x.m, 0);
    p.w_codes = e2m1 ? kernels::Fp8MmaWeightCodes::kE2M1 : kernels::Fp8MmaWeightCodes::kE4M3;
    p.w = e2m1 ? packed.get() + g * layout_rows * k / 2 : codes.get() + g * n * k;
    p.w_shift = e2m1 ? shift.get() + g * layout_rows * k / 32 : nullptr;
    p.w_scale = scale.get() + g * scale_group;
    p.w_scale_ld = scale_ld;
    return p;
  }
};

// The device tables grouped_params takes (w_of, scale_of, shift_of): entry i holds group
// groups[i]'s weight as stored or (e2m1 false) as the cast's codes, with no shifts.
struct Fp4Tables {
  Fp4Tables(const Fp4Weights& w, const Operands& x, const std::vector<int64_t>& groups, bool e2m1)
      : w_of(groups.size()), shift_of(groups.size()), scale_of(groups.size()) {
    std::vector<const uint8_t*> ws, shifts;
    std::vector<const float*> scales;
    for (const int64_t g : groups) {
      const kernels::Fp8MmaGemmParams d = w.dense(x, g, e2m1);
      ws.push_back(d.w);
      shifts.push_back(d.w_shift);
      scales.push_back(d.w_scale);
    }
    w_of.upload(ws);
    shift_of.upload(shifts);
    scale_of.upload(scales);
  }
  DeviceBuffer<const uint8_t*> w_of, shift_of;
  DeviceBuffer<const float*> scale_of;
};

class Fp8MmaGemmE2m1Cuda : public ::testing::TestWithParam<Shape3> {};

// Dense: the stored FP4 weight gives the cast's bits, in fp32 and bf16, for tiles of 8, 16 and 32
// rows, weight rows past a 16-row block's end and K blocks spread unevenly over the four warps; on
// an H200 (132 SMs) 5 x 34004 x 256 takes the kernel's two weight tiles a block (2126 blocks of
// one would be more than 2 x 8 an SM), its last block's second tile holding 4 of 16 rows.
TEST_P(Fp8MmaGemmE2m1Cuda, SameBitsAsTheFp8CastDense) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const Operands x(m, n, k, 1, static_cast<uint32_t>(m * 5 + n + k));
  const Fp4Weights w(n, k, 1, static_cast<uint32_t>(m + n * 3 + k));
  for (const bool bf16 : {false, true}) {
    const std::vector<uint8_t> cast = run_forced(w.dense(x, 0, false), kernels::Fp8MmaKernel::kStreamed, m, bf16);
    const std::vector<uint8_t> stored = run_forced(w.dense(x, 0, true), kernels::Fp8MmaKernel::kAuto, m, bf16);
    EXPECT_EQ(first_difference(stored, cast, n, bf16), "") << (bf16 ? "bf16" : "fp32") << " output";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8MmaGemmE2m1Cuda,
                         ::testing::Values(Shape3{1, 256, 512}, Shape3{5, 200, 1152}, Shape3{16, 384, 2048},
                                           Shape3{29, 136, 640}, Shape3{70, 256, 1024}, Shape3{5, 34004, 256}),
                         testing::gemm_shape_name);

// Grouped (the routed experts' layout), with a second output over the same tiles (gate and up):
// both outputs get the cast's bits.
TEST(Fp8MmaGemmE2m1Cuda, SameBitsAsTheFp8CastGroupedWithASecondOutput) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 21, n = 264, k = 1024;
  const Operands x(m, n, k, 1, 5);
  const Fp4Weights w(n, k, 2, 6);
  // Rows [0, 9) meet group 1, [9, 21) group 0; tiles of 8 rows; the second output's groups are
  // the first's swapped (group offset 2 into tables of four).
  const DeviceTiles tiles({{1, 0, 8}, {1, 8, 1}, {0, 9, 8}, {0, 17, 4}}, 4);
  const auto run = [&](bool e2m1) {
    const Fp4Tables t(w, x, {0, 1, 1, 0}, e2m1);
    kernels::Fp8MmaGemmParams p = grouped_params(w.dense(x, 0, e2m1), tiles, 8, t.w_of.get(), t.scale_of.get(),
                                                 e2m1 ? t.shift_of.get() : nullptr);
    DeviceBuffer<float> second(static_cast<size_t>(m * n));
    DSV4_CUDA_CHECK(cudaMemset(second.get(), 0xff, static_cast<size_t>(m * n) * sizeof(float)));
    p.second = {.w_scale_ld = w.scale_ld, .y = {second.get(), false}, .ldy = n, .n = n, .group_offset = 2};
    std::vector<uint8_t> both = run_forced(p, kernels::Fp8MmaKernel::kAuto, m, false);
    const std::vector<float> s = second.download();
    const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
    both.insert(both.end(), bytes, bytes + s.size() * sizeof(float));
    return both;
  };
  const std::vector<uint8_t> cast = run(false);
  for (size_t i = 0; i < cast.size(); i += 4) {
    uint32_t v = 0;
    std::memcpy(&v, &cast[i], 4);
    ASSERT_NE(v, 0xffffffffu) << "output element " << i / 4 << " was not written";
  }
  EXPECT_EQ(first_difference(run(true), cast, n, false), "") << "rows 0..20: first output, 21..41: second";
}

// Which kernel reads e2m1 weights (no GPU needed): the streamed or the staged one by e4m3's rules,
// and a UsageError naming the kernel for those that read e4m3 tiles only.
TEST(Fp8MmaGemmE2m1Cuda, TakesTheStreamedOrTheStagedKernel) {
  using kernels::Fp8MmaKernel;
  kernels::Fp8MmaGemmParams p;
  p.w_codes = kernels::Fp8MmaWeightCodes::kE2M1;
  p.k = 4096;
  const auto dense = [&](int64_t m, int64_t n) {
    p.m = m;
    p.n = n;
    return kernels::fp8_mma_gemm_choice(p);
  };
  const auto expect_refused = [&](Fp8MmaKernel kernel) {
    p.kernel = kernel;
    try {
      kernels::fp8_mma_gemm_choice(p);
      ADD_FAILURE() << "no error for e2m1 weights on the " << kernels::fp8_mma_kernel_name(kernel) << " kernel";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("e2m1"), std::string::npos) << what;
      EXPECT_NE(what.find(kernels::fp8_mma_kernel_name(kernel)), std::string::npos) << what;
    }
    p.kernel = Fp8MmaKernel::kAuto;
  };
  EXPECT_EQ(dense(1, 4096), Fp8MmaKernel::kStreamed);
  EXPECT_EQ(dense(63, 32768), Fp8MmaKernel::kStreamed);
  EXPECT_EQ(dense(64, 512), Fp8MmaKernel::kStreamed);  // 4 tiles of 128 x 128: too few for the GPU
  EXPECT_EQ(dense(64, 8192), Fp8MmaKernel::kStaged);
  EXPECT_EQ(dense(4096, 4096), Fp8MmaKernel::kStaged);
  p.kernel = Fp8MmaKernel::kStaged;
  EXPECT_EQ(dense(1, 16), Fp8MmaKernel::kStaged);
  p.kernel = Fp8MmaKernel::kStreamed;
  EXPECT_EQ(dense(4096, 4096), Fp8MmaKernel::kStreamed);
  expect_refused(Fp8MmaKernel::kStagedIntegerX);
  expect_refused(Fp8MmaKernel::kWgmmaFp8);

  kernels::Fp8MmaTile tile;
  p.tiles = &tile;  // grouped: the choice reads tile_rows only
  for (const int32_t rows : {8, 16, 32}) {
    p.tile_rows = rows;
    EXPECT_EQ(kernels::fp8_mma_gemm_choice(p), Fp8MmaKernel::kStreamed) << rows;
  }
  for (const int32_t rows : {64, 100, 128}) {
    p.tile_rows = rows;
    EXPECT_EQ(kernels::fp8_mma_gemm_choice(p), Fp8MmaKernel::kStaged) << rows;
  }
  expect_refused(Fp8MmaKernel::kStagedIntegerX);
  expect_refused(Fp8MmaKernel::kWgmmaFp8);
  p.kernel = Fp8MmaKernel::kStreamed;
  EXPECT_THROW(kernels::fp8_mma_gemm_choice(p), UsageError);  // 128-row tiles
  // A second output (gate and up) takes the streamed kernel's tiles only.
  p.kernel = Fp8MmaKernel::kAuto;
  p.second.n = 16;
  EXPECT_THROW(kernels::fp8_mma_gemm_choice(p), UsageError);
  p.tile_rows = 32;
  EXPECT_EQ(kernels::fp8_mma_gemm_choice(p), Fp8MmaKernel::kStreamed);
}

class Fp8MmaGemmE2m1StagedCuda : public ::testing::TestWithParam<Shape3> {};

// Dense: the stored FP4 weight on the staged kernel, and on the streamed one, gives the bits of its
// FP8 cast on the staged kernel, in fp32 and bf16, with x tiles cut short, a ragged n, 1 to 16 K
// blocks (passes of unequal length) and y with 3 spare columns and a spare row that keep 0xff.
TEST_P(Fp8MmaGemmE2m1StagedCuda, GivesTheFp8CastBitsDense) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto [m, n, k] = GetParam();
  const Operands x(m, n, k, 1, static_cast<uint32_t>(m * 3 + n * 7 + k));
  const Fp4Weights w(n, k, 1, static_cast<uint32_t>(m + n + k * 5));
  kernels::Fp8MmaGemmParams cast = w.dense(x, 0, false), stored = w.dense(x, 0, true);
  cast.ldy = stored.ldy = n + 3;
  for (const bool bf16 : {false, true}) {
    const std::vector<uint8_t> want = run_forced(cast, kernels::Fp8MmaKernel::kStaged, m + 1, bf16);
    ASSERT_EQ(written_exactly(want, m, n, n + 3, bf16), "") << (bf16 ? "bf16" : "fp32") << " output of the cast";
    for (const kernels::Fp8MmaKernel kernel : {kernels::Fp8MmaKernel::kStaged, kernels::Fp8MmaKernel::kStreamed})
      EXPECT_EQ(first_difference(run_forced(stored, kernel, m + 1, bf16), want, n + 3, bf16), "")
          << (bf16 ? "bf16" : "fp32") << " output, got = the " << kernels::fp8_mma_kernel_name(kernel)
          << " kernel on the stored FP4 weight, want = the staged kernel on its FP8 cast";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8MmaGemmE2m1StagedCuda,
                         ::testing::Values(Shape3{64, 264, 1024}, Shape3{128, 136, 128}, Shape3{200, 1032, 1152},
                                           Shape3{300, 520, 640}, Shape3{129, 1544, 2048}, Shape3{1000, 264, 384}),
                         testing::gemm_shape_name);

// Grouped (the routed experts at prefill): the stored FP4 weights on the staged kernel over tiles
// of 128 and of 100 rows, and on the streamed kernel over tiles of 32, give the bits of the FP8
// casts on the staged kernel's 128-row tiles, in fp32 and bf16, with groups of 1, 130, 0, 257, 64
// and 128 rows (partial tiles), a ragged n and 9 K blocks; tiles past tile_count don't run.
TEST(Fp8MmaGemmE2m1StagedCuda, GivesTheFp8CastBitsGrouped) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t rows[] = {1, 130, 0, 257, 64, 128};
  std::vector<int64_t> begin = {0}, groups;
  for (const int64_t r : rows) {
    groups.push_back(static_cast<int64_t>(groups.size()));
    begin.push_back(begin.back() + r);
  }
  const int64_t m = begin.back(), n = 264, k = 1152;
  const Operands x(m, n, k, 1, 43);
  const Fp4Weights w(n, k, static_cast<int64_t>(groups.size()), 44);
  const Fp4Tables cast_tables(w, x, groups, false), stored_tables(w, x, groups, true);
  const auto run = [&](bool e2m1, int32_t tile_rows, bool bf16) {
    const DeviceTiles tiles = group_tiles(begin, tile_rows);
    const Fp4Tables& t = e2m1 ? stored_tables : cast_tables;
    const kernels::Fp8MmaGemmParams p = grouped_params(w.dense(x, 0, e2m1), tiles, tile_rows, t.w_of.get(),
                                                       t.scale_of.get(), e2m1 ? t.shift_of.get() : nullptr);
    EXPECT_EQ(kernels::fp8_mma_gemm_choice(p),
              tile_rows == 32 ? kernels::Fp8MmaKernel::kStreamed : kernels::Fp8MmaKernel::kStaged)
        << "tile_rows " << tile_rows;
    return run_forced(p, kernels::Fp8MmaKernel::kAuto, m, bf16);
  };
  for (const bool bf16 : {false, true}) {
    const std::vector<uint8_t> want = run(false, 128, bf16);
    ASSERT_EQ(written_exactly(want, m, n, n, bf16), "") << (bf16 ? "bf16" : "fp32") << " output of the casts";
    for (const int32_t tile_rows : {128, 100, 32})
      EXPECT_EQ(first_difference(run(true, tile_rows, bf16), want, n, bf16), "")
          << (bf16 ? "bf16" : "fp32") << " output, got = the stored FP4 weights over tiles of " << tile_rows
          << " rows, want = their FP8 casts on the staged kernel";
  }
}

// Grouped on the f16 WGMMA kernel (the routed experts at prefill): the stored FP4 weights, which
// its consumers convert as they go, over tiles of 128, 100, 80, 48 and 20 rows (items whose MMAs
// cover 32, 64, 96 or 128 columns) give the bits of their FP8 casts on the staged kernel, in fp32
// and bf16, over kGroupedE2m1Cases; tiles past tile_count don't run.
// The grouped e2m1 cases of the f16-wgmma and chained tests: each group's rows (partial and
// empty groups), n and K: a ragged n and 9 K blocks, larger groups at an expert's n and K, and 1
// and 3 K blocks (passes without a block).
struct GroupedE2m1Case {
  std::vector<int64_t> rows;
  int64_t n, k;
};
const GroupedE2m1Case kGroupedE2m1Cases[] = {{{1, 130, 0, 257, 64, 128}, 264, 1152},
                                             {{192, 181, 0, 205, 1, 320}, 2048, 1024},
                                             {{64, 3, 200}, 256, 128},
                                             {{130, 0, 70}, 136, 384}};

// The first row of each group of rows `rows`, and past the last one the total.
std::vector<int64_t> group_begins(const std::vector<int64_t>& rows) {
  std::vector<int64_t> begin = {0};
  for (const int64_t r : rows) begin.push_back(begin.back() + r);
  return begin;
}

// 0, 1, .., count - 1: each group's own weight.
std::vector<int64_t> group_ids(size_t count) {
  std::vector<int64_t> ids(count);
  std::iota(ids.begin(), ids.end(), int64_t{0});
  return ids;
}

// A case's operands: x over all groups' rows (seed seed + n), a weight a group (seed seed + 1 + k)
// and their tables as stored and as the FP8 cast.
struct GroupedE2m1Operands {
  GroupedE2m1Operands(const GroupedE2m1Case& c, uint32_t seed)
      : begin(group_begins(c.rows)), groups(group_ids(c.rows.size())), m(begin.back()), n(c.n), k(c.k),
        x(m, n, k, 1, seed + static_cast<uint32_t>(n)),
        w(n, k, static_cast<int64_t>(c.rows.size()), seed + 1 + static_cast<uint32_t>(k)),
        cast_tables(w, x, groups, false),
        stored_tables(w, x, groups, true) {}

  // The grouped call over tiles of up to tile_rows rows with the weights as stored (e2m1) or as
  // their cast, y not yet set; `tiles` must outlive the call.
  kernels::Fp8MmaGemmParams params(bool stored, const DeviceTiles& tiles, int32_t tile_rows) const {
    const Fp4Tables& t = stored ? stored_tables : cast_tables;
    return grouped_params(w.dense(x, 0, stored), tiles, tile_rows, t.w_of.get(), t.scale_of.get(),
                          stored ? t.shift_of.get() : nullptr);
  }

  std::vector<int64_t> begin, groups;
  int64_t m, n, k;
  Operands x;
  Fp4Weights w;
  Fp4Tables cast_tables, stored_tables;
};

TEST(Fp8MmaGemmE2m1StagedCuda, F16WgmmaGivesTheFp8CastBitsGrouped) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const GroupedE2m1Case& c : kGroupedE2m1Cases) {
    const GroupedE2m1Operands ops(c, 45);
    const int64_t m = ops.m, n = ops.n;
    const F16Operands f16(ops.w.dense(ops.x, 0, false));  // x's fp16 values and padded scales
    const auto run = [&](bool e2m1, int32_t tile_rows, bool bf16) {
      const DeviceTiles tiles = group_tiles(ops.begin, tile_rows);
      kernels::Fp8MmaGemmParams p = ops.params(e2m1, tiles, tile_rows);
      if (!e2m1) return run_forced(p, kernels::Fp8MmaKernel::kStaged, m, bf16);
      p.x16 = f16.p.x16;
      p.x_scale = f16.p.x_scale;
      p.x_scale_ld = f16.p.x_scale_ld;
      return run_forced(p, kernels::Fp8MmaKernel::kF16Wgmma, m, bf16);
    };
    for (const bool bf16 : {false, true}) {
      const std::vector<uint8_t> want = run(false, 128, bf16);
      for (const int32_t tile_rows : {128, 100, 80, 48, 20})
        EXPECT_EQ(first_difference(run(true, tile_rows, bf16), want, n, bf16), "")
            << (bf16 ? "bf16" : "fp32") << " output, n " << n << ", got = the stored FP4 weights on the f16-wgmma "
            << "kernel over tiles of " << tile_rows << " rows, want = their FP8 casts on the staged kernel";
    }
  }
}

// The relative Frobenius distance between two fp32 outputs as run_forced returns them (0 when
// want is all zeros).
double relative_distance(const std::vector<uint8_t>& got_bytes, const std::vector<uint8_t>& want_bytes) {
  std::vector<float> got(got_bytes.size() / 4), want(want_bytes.size() / 4);
  std::memcpy(got.data(), got_bytes.data(), got.size() * 4);
  std::memcpy(want.data(), want_bytes.data(), want.size() * 4);
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    err2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref2 += double(want[i]) * want[i];
  }
  return ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
}

// x's operand of the chained order (act_quant_fp8's q16_bf16_scaled) from x's codes and scales on
// the host: each code's value times its scale as a bf16 (exact), each K block's values re-laid as
// e4m3_to_f16_mma_order lays codes, rows padded to a multiple of 4 (zeros).
std::vector<uint16_t> chained_x(const Operands& x) {
  std::vector<uint16_t> values(static_cast<size_t>((x.m + 3) / 4 * 4 * x.k), 0);
  for (int64_t r = 0; r < x.m; ++r)
    for (int64_t c = 0; c < x.k; ++c) {
      const int64_t in_block = c % 128, t = in_block / 32, step = in_block % 32 / 4, i = in_block % 4;
      const int64_t at = r * x.k + c - in_block + 16 * step + 2 * t + i % 2 + 8 * (i / 2);
      values[static_cast<size_t>(at)] = float_to_bf16(static_cast<float>(x.x_at(r, c)));
    }
  return values;
}

// The same values in x's own K order (act_quant_fp8's q16_natural_order: kChainedStreamed's x16).
std::vector<uint16_t> chained_x_natural(const Operands& x) {
  std::vector<uint16_t> values(static_cast<size_t>(x.m * x.k));
  for (int64_t r = 0; r < x.m; ++r)
    for (int64_t c = 0; c < x.k; ++c)
      values[static_cast<size_t>(r * x.k + c)] = float_to_bf16(static_cast<float>(x.x_at(r, c)));
  return values;
}

// The chained order (kChainedBf16Wgmma, the routed experts at prefill under Fp8Gemm::kChained): not
// the other kernels' bits, but a row's bits depend on that row alone (the same over tiles of 128,
// 100, 80, 48 and 20 rows, whose MMAs cover 32 to 128 columns, in fp32 and bf16), every output of
// the call's rows and n is written and nothing else, and its fp32 sums of exact products agree with
// the staged kernel's (the same products summed in another order) to fp32 accuracy, over the
// F16Wgmma test's cases.
TEST(Fp8MmaGemmE2m1StagedCuda, ChainedBf16WgmmaIsRowwiseAndAsPreciseAsTheStagedOrder) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const GroupedE2m1Case& c : kGroupedE2m1Cases) {
    const GroupedE2m1Operands ops(c, 47);
    const int64_t m = ops.m, n = ops.n, k = ops.k;
    const std::vector<uint16_t> x_values = chained_x(ops.x);
    DeviceBuffer<uint16_t> x16(x_values.size());
    x16.upload(x_values);
    const auto run = [&](bool chained, int32_t tile_rows, bool bf16) {
      const DeviceTiles tiles = group_tiles(ops.begin, tile_rows);
      kernels::Fp8MmaGemmParams p = ops.params(chained, tiles, tile_rows);
      if (!chained) return run_forced(p, kernels::Fp8MmaKernel::kStaged, m, bf16);
      p.x16 = x16.get();
      p.x_scale = nullptr;
      p.x_scale_ld = 0;
      return run_forced(p, kernels::Fp8MmaKernel::kChainedBf16Wgmma, m, bf16);
    };
    for (const bool bf16 : {false, true}) {
      const std::vector<uint8_t> first = run(true, 128, bf16);
      ASSERT_EQ(written_exactly(first, m, n, n, bf16), "") << "n " << n << (bf16 ? ", bf16" : ", fp32");
      for (const int32_t tile_rows : {100, 80, 48, 20})
        EXPECT_EQ(first_difference(run(true, tile_rows, bf16), first, n, bf16), "")
            << (bf16 ? "bf16" : "fp32") << " output, n " << n << ", got = tiles of " << tile_rows
            << " rows, want = tiles of 128";
    }
    const double rel = relative_distance(run(true, 128, false), run(false, 128, false));
    std::printf("[measure] chained bf16 wgmma, n %lld k %lld: relative Frobenius distance to the staged order %.3e\n",
                static_cast<long long>(n), static_cast<long long>(k), rel);
    EXPECT_LT(rel, 2e-7) << "n " << n << ", k " << k;  // measured 0 .. 4.1e-8 (H100)
  }
}

// e4m3_to_bf16_scaled_mma_order (the chained order's dense weights): each code's value times its
// 128 x 128 block's scale as an exact bf16, at the code's K position in e4m3_to_f16_mma_order's
// order, over two 128-row blocks of scales and 3 K blocks.
TEST(E4m3ToBf16ScaledMmaOrder, PlacesEveryScaledValueAtItsStepSlot) {
  DSV4_SKIP_WITHOUT_GPU();
  const Operands w(1, 200, 384, 1, 61);  // its weight: 200 rows, block scales 2^-9 .. 2^-4
  DeviceBuffer<uint16_t> dout(static_cast<size_t>(w.n * w.k));
  kernels::e4m3_to_bf16_scaled_mma_order(w.dw.get(), w.dws.get(), w.ws_ld, dout.get(), w.n, w.k, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = dout.download();
  for (int64_t r = 0; r < w.n; ++r)
    for (int64_t c = 0; c < w.k; ++c) {
      const int64_t in_block = c % 128, t = in_block / 32, step = in_block % 32 / 4, i = in_block % 4;
      const uint16_t got = out[static_cast<size_t>(r * w.k + c - in_block + 16 * step + 2 * t + i % 2 + 8 * (i / 2))];
      const double want = w.w_at(0, r, c);
      if (std::isnan(want)) ASSERT_TRUE(std::isnan(bf16_to_float(got))) << "row " << r << " input " << c;
      else ASSERT_EQ(static_cast<double>(bf16_to_float(got)), want) << "row " << r << " input " << c;
    }
  EXPECT_THROW(kernels::e4m3_to_bf16_scaled_mma_order(w.dw.get(), w.dws.get(), 2, dout.get(), w.n, w.k, nullptr),
               UsageError);
}

// The chained order on dense e4m3 weights (the prefill-sized FP8 linears under Fp8Gemm::kChained):
// a row's bits depend on that row alone (rows run in uneven slices of the batch give the whole
// call's bits), every output is written, and the fp32 sums agree with the staged kernel's (the
// same exact products in another order) to fp32 accuracy; 3 K blocks (a pass without one) and 9.
TEST(Fp8MmaGemmCuda, ChainedBf16WgmmaDenseIsRowwiseAndAsPreciseAsTheStagedOrder) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{300, 256, 384}, {640, 520, 1152}}) {
    const Operands ops(m, n, k, 1, static_cast<uint32_t>(m + n + k));
    const std::vector<uint16_t> x_values = chained_x(ops);
    DeviceBuffer<uint16_t> x16(x_values.size()), w16(static_cast<size_t>(n * k));
    x16.upload(x_values);
    kernels::e4m3_to_bf16_scaled_mma_order(ops.dw.get(), ops.dws.get(), ops.ws_ld, w16.get(), n, k, nullptr);
    const auto chained = [&](int64_t r0, int64_t rows, bool bf16) {
      kernels::Fp8MmaGemmParams p = ops.inputs(r0, rows, 0);
      p.x16 = x16.get() + r0 * k;
      p.w16 = w16.get();
      p.x_scale = nullptr;
      p.x_scale_ld = 0;
      return run_forced(p, kernels::Fp8MmaKernel::kChainedBf16Wgmma, rows, bf16);
    };
    for (const bool bf16 : {false, true}) {
      const std::vector<uint8_t> whole = chained(0, m, bf16);
      ASSERT_EQ(written_exactly(whole, m, n, n, bf16), "") << m << " x " << n << " x " << k;
      const size_t elem = bf16 ? 2 : 4;
      for (const auto& [r0, rows] : {std::pair<int64_t, int64_t>{0, 1}, {1, 130}, {131, m - 131}}) {
        const std::vector<uint8_t> part = chained(r0, rows, bf16);
        const std::vector<uint8_t> want(whole.begin() + static_cast<int64_t>(r0 * n * elem),
                                        whole.begin() + static_cast<int64_t>((r0 + rows) * n * elem));
        EXPECT_EQ(first_difference(part, want, n, bf16), "")
            << (bf16 ? "bf16" : "fp32") << ", rows " << r0 << ".." << r0 + rows - 1 << " alone against the whole call";
      }
    }
    const double rel = relative_distance(chained(0, m, false),
                                         run_forced(ops.inputs(0, m, 0), kernels::Fp8MmaKernel::kStaged, m, false));
    std::printf("[measure] chained bf16 wgmma dense %lld x %lld x %lld: relative Frobenius distance to the staged "
                "order %.3e\n", static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), rel);
    EXPECT_LT(rel, 2e-7);  // measured 0 .. 6.9e-8 (H100)
  }
}

// The chained order on mma.sync (chained_mma_sync_reference: one warp a 16 x 8 tile, its four K
// lanes as four m16n8k16 accumulations) gives the chained WGMMA kernel's bits: a k16 step's sum into
// a running fp32 accumulator is the same on both instructions, so decode kernels on mma.sync can
// take the chained order and keep a prefill's rows equal to the same rows decoded. Shapes from a
// decode row to prefill tiles, 3 K blocks (a lane without one) to 32.
TEST(Fp8MmaGemmCuda, ChainedOrderOnMmaSyncGivesTheChainedWgmmaBits) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 512, 4096}, {5, 1040, 384},
                                {300, 256, 1152}, {130, 384, 2048}}) {
    const Operands ops(m, n, k, 1, static_cast<uint32_t>(3 * m + n + k));
    const std::vector<uint16_t> x_values = chained_x(ops);
    DeviceBuffer<uint16_t> x16(x_values.size()), w16(static_cast<size_t>(n * k));
    DeviceBuffer<float> reference(static_cast<size_t>(m * n));
    x16.upload(x_values);
    kernels::e4m3_to_bf16_scaled_mma_order(ops.dw.get(), ops.dws.get(), ops.ws_ld, w16.get(), n, k, nullptr);
    testing::chained_mma_sync_reference(x16.get(), w16.get(), reference.get(), m, n, k);
    kernels::Fp8MmaGemmParams p = ops.inputs(0, m, 0);
    p.x16 = x16.get();
    p.w16 = w16.get();
    p.x_scale = nullptr;
    p.x_scale_ld = 0;
    const std::vector<float> want = reference.download();
    std::vector<uint8_t> want_bytes(want.size() * 4);
    std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
    EXPECT_EQ(first_difference(run_forced(p, kernels::Fp8MmaKernel::kChainedBf16Wgmma, m, false), want_bytes, n, false),
              "")
        << m << " x " << n << " x " << k << ": got = the chained WGMMA kernel, want = mma.sync in the chained order";
  }
}

// The chained order on the streamed kernel (kChainedStreamed, decode sizes) gives the chained WGMMA
// kernel's bits, in fp32 and bf16: dense over x tiles of 8, 16 and 32 rows (one and two weight
// tiles a block) from a single row to 40, 1 to 32 K blocks.
TEST(Fp8MmaGemmCuda, ChainedStreamedGivesTheChainedWgmmaBitsDense) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 520, 4096}, {5, 264, 128}, {13, 384, 1152},
                                {24, 4096, 384}, {40, 4096, 256}, {8, 136, 2048}}) {
    const Operands ops(m, n, k, 1, static_cast<uint32_t>(5 * m + n + k));
    const std::vector<uint16_t> mma_x = chained_x(ops), natural_x = chained_x_natural(ops);
    DeviceBuffer<uint16_t> x16(mma_x.size()), x16_natural(natural_x.size()), w16(static_cast<size_t>(n * k));
    x16.upload(mma_x);
    x16_natural.upload(natural_x);
    kernels::e4m3_to_bf16_scaled_mma_order(ops.dw.get(), ops.dws.get(), ops.ws_ld, w16.get(), n, k, nullptr);
    for (const bool bf16 : {false, true}) {
      kernels::Fp8MmaGemmParams p = ops.inputs(0, m, 0);
      p.x_scale = nullptr;
      p.x_scale_ld = 0;
      p.x16 = x16_natural.get();
      const std::vector<uint8_t> got = run_forced(p, kernels::Fp8MmaKernel::kChainedStreamed, m, bf16);
      p.x16 = x16.get();
      p.w16 = w16.get();
      EXPECT_EQ(first_difference(got, run_forced(p, kernels::Fp8MmaKernel::kChainedBf16Wgmma, m, bf16), n, bf16), "")
          << m << " x " << n << " x " << k << (bf16 ? ", bf16" : ", fp32")
          << ": got = the chained streamed kernel, want = the chained WGMMA kernel";
    }
  }
}

// The same for the routed experts' e2m1 weights as stored: grouped tiles of 8 (one and two weight
// tiles a block), 16 and 32 rows on the streamed kernel against tiles of 128 on the WGMMA kernel,
// over kGroupedE2m1Cases.
TEST(Fp8MmaGemmE2m1StagedCuda, ChainedStreamedGivesTheChainedWgmmaBitsGrouped) {
  DSV4_SKIP_WITHOUT_GPU();
  for (const GroupedE2m1Case& c : kGroupedE2m1Cases) {
    const GroupedE2m1Operands ops(c, 49);
    const int64_t m = ops.m, n = ops.n;
    const std::vector<uint16_t> mma_x = chained_x(ops.x), natural_x = chained_x_natural(ops.x);
    DeviceBuffer<uint16_t> x16(mma_x.size()), x16_natural(natural_x.size());
    x16.upload(mma_x);
    x16_natural.upload(natural_x);
    const auto run = [&](kernels::Fp8MmaKernel kernel, int32_t tile_rows, bool bf16) {
      const DeviceTiles tiles = group_tiles(ops.begin, tile_rows);
      kernels::Fp8MmaGemmParams p = ops.params(true, tiles, tile_rows);
      p.x16 = kernel == kernels::Fp8MmaKernel::kChainedStreamed ? x16_natural.get() : x16.get();
      p.x_scale = nullptr;
      p.x_scale_ld = 0;
      return run_forced(p, kernel, m, bf16);
    };
    for (const bool bf16 : {false, true}) {
      const std::vector<uint8_t> want = run(kernels::Fp8MmaKernel::kChainedBf16Wgmma, 128, bf16);
      for (const int32_t tile_rows : {8, 16, 32})
        EXPECT_EQ(first_difference(run(kernels::Fp8MmaKernel::kChainedStreamed, tile_rows, bf16), want, n, bf16), "")
            << (bf16 ? "bf16" : "fp32") << " output, n " << n << ", got = the chained streamed kernel over tiles of "
            << tile_rows << " rows, want = the chained WGMMA kernel over tiles of 128";
    }
  }
}

}  // namespace
}  // namespace dsv4
