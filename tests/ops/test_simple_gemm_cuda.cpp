// kernels::simple_gemm against a host implementation of its summation order (simple_gemm.h), bit
// for bit, and against itself: both kernels, whole batches and row slices of every size give the
// same bits, so a row's output depends neither on the rows beside it nor on the kernel chosen.
// Every weight type with fp32 and bf16 x, K off the chunk and vector widths, groups, padded and
// misaligned rows. Skips where no GPU exists (except the argument check).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/gemm/simple_gemm.h"
#include "tests/ops/cuda_test_util.h"

// The reference's float arithmetic must happen in float (no x87-style excess precision).
static_assert(FLT_EVAL_METHOD == 0, "float expressions must be evaluated in float");

namespace dsv4 {
namespace {

using kernels::GemmWeight;
using kernels::SimpleGemmKernel;
using testing::DeviceBuffer;

struct Shape {
  int64_t n, k, groups;
  int64_t ldx_pad;  // extra x elements at the end of each row (after all groups)
  bool offset;      // x and w start one element past a 16-byte boundary
};

int64_t weight_size(GemmWeight w) { return w == GemmWeight::kF32 ? 4 : w == GemmWeight::kBF16 ? 2 : 1; }

const char* weight_name(GemmWeight w) { return w == GemmWeight::kF32 ? "f32" : w == GemmWeight::kBF16 ? "bf16" : "e4m3"; }

// y[m, groups, n] = x[m, groups, k] @ w[groups * n, k]^T (grouped_linear's layout) on random data,
// held on the host as the values the kernels compute with and on the device as stored.
class Problem {
 public:
  Problem(GemmWeight w_type, bool x_bf16, bool y_bf16, const Shape& s, int64_t m, uint32_t seed)
      : w_type_(w_type), x_bf16_(x_bf16), y_bf16_(y_bf16), s_(s), m_(m), xsize_(x_bf16 ? 2 : 4),
        ysize_(y_bf16 ? 2 : 4), ldx_(s.groups * s.k + s.ldx_pad) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t x_lead = s.offset ? xsize_ : 0, w_lead = s.offset ? weight_size(w_type) : 0;

    x_vals_.resize(static_cast<size_t>(m * s.groups * s.k));
    std::vector<uint8_t> x_dev(static_cast<size_t>(x_lead + m * ldx_ * xsize_));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < s.groups * s.k; ++i) {
        uint8_t* dst = &x_dev[static_cast<size_t>(x_lead + (r * ldx_ + i) * xsize_)];
        float v = normal(rng);
        if (x_bf16) {
          const uint16_t b = float_to_bf16(v);
          v = bf16_to_float(b);
          std::memcpy(dst, &b, 2);
        } else {
          std::memcpy(dst, &v, 4);
        }
        x_vals_[static_cast<size_t>(r * s.groups * s.k + i)] = v;
      }

    const int64_t rows = s.groups * s.n;
    if (w_type == GemmWeight::kE4M3) {
      scale_ld_ = (s.k + 127) / 128 + 1;  // one spare column, so the row stride is tested
      scales_.resize(static_cast<size_t>((rows + 127) / 128 * scale_ld_));
      for (auto& v : scales_) v = std::ldexp(1.0f, -4 - static_cast<int>(rng() % 8));
    }
    w_vals_.resize(static_cast<size_t>(rows * s.k));
    std::vector<uint8_t> w_dev(static_cast<size_t>(w_lead + rows * s.k * weight_size(w_type)));
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t c = 0; c < s.k; ++c) {
        const int64_t i = row * s.k + c;
        uint8_t* dst = &w_dev[static_cast<size_t>(w_lead + i * weight_size(w_type))];
        float v = normal(rng);
        if (w_type == GemmWeight::kF32) {
          std::memcpy(dst, &v, 4);
        } else if (w_type == GemmWeight::kBF16) {
          const uint16_t b = float_to_bf16(v);
          v = bf16_to_float(b);
          std::memcpy(dst, &b, 2);
        } else {
          uint8_t code;
          do code = static_cast<uint8_t>(rng() & 0xff);
          while ((code & 0x7f) == 0x7f);  // every finite code, subnormals included; no NaN
          *dst = code;
          v = e4m3_to_float(code) * scales_[static_cast<size_t>((row / 128) * scale_ld_ + c / 128)];
        }
        w_vals_[static_cast<size_t>(i)] = v;
      }

    dx_ = std::make_unique<DeviceBuffer<uint8_t>>(x_dev.size());
    dw_ = std::make_unique<DeviceBuffer<uint8_t>>(w_dev.size());
    dy_ = std::make_unique<DeviceBuffer<uint8_t>>(static_cast<size_t>(m * row_bytes()));
    dscale_ = std::make_unique<DeviceBuffer<float>>(scales_.size());
    dx_->upload(x_dev);
    dw_->upload(w_dev);
    if (!scales_.empty()) dscale_->upload(scales_);
    x_ptr_ = dx_->get() + x_lead;
    w_ptr_ = dw_->get() + w_lead;
  }

  int64_t row_elems() const { return s_.groups * s_.n; }
  int64_t row_bytes() const { return row_elems() * ysize_; }

  // Row r of y, computed in the canonical order: 64-column chunks, each an fma chain from 0 over
  // its columns ascending, the chunks' partials added to a total from 0 in order.
  std::vector<uint8_t> reference_row(int64_t r) const { return row_bytes_of(r, kernels::kSimpleGemmChunk); }

  // The same with one chunk spanning all of K: the single fma chain the old kernel used.
  std::vector<uint8_t> single_chain_row(int64_t r) const { return row_bytes_of(r, s_.k); }

  // Runs `kernel` over all rows in slices of the given sizes (taken in turn, the last one cut
  // short), after filling y with `poison` bytes; returns y.
  std::vector<uint8_t> run(SimpleGemmKernel kernel, const std::vector<int64_t>& slices, uint8_t poison) {
    DSV4_CUDA_CHECK(cudaMemset(dy_->get(), poison, dy_->size()));
    size_t turn = 0;
    for (int64_t r0 = 0; r0 < m_;) {
      const int64_t rows = std::min(slices[turn++ % slices.size()], m_ - r0);
      kernels::SimpleGemmParams p;
      p.x = {x_ptr_ + r0 * ldx_ * xsize_, x_bf16_};
      p.ldx = ldx_;
      p.w = w_ptr_;
      p.w_type = w_type_;
      p.w_scale = scales_.empty() ? nullptr : dscale_->get();
      p.w_scale_ld = scale_ld_;
      p.y = {dy_->get() + r0 * row_bytes(), y_bf16_};
      p.ldy = row_elems();
      p.m = rows;
      p.n = s_.n;
      p.k = s_.k;
      p.groups = s_.groups;
      p.x_group_stride = s_.k;
      p.y_group_stride = s_.n;
      p.kernel = kernel;
      kernels::simple_gemm(p, nullptr);
      r0 += rows;
    }
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    return dy_->download();
  }

  // "row r, group g, column j: <value>" for element e of a y row-major buffer.
  std::string describe(const std::vector<uint8_t>& y, int64_t e) const {
    std::ostringstream os;
    os << std::setprecision(9) << "row " << e / row_elems() << ", group " << e % row_elems() / s_.n << ", column " << e % s_.n << ": "
       << value_at(y.data(), e);
    return os.str();
  }

  float value_at(const uint8_t* y, int64_t e) const {
    if (y_bf16_) {
      uint16_t b;
      std::memcpy(&b, y + e * 2, 2);
      return bf16_to_float(b);
    }
    float f;
    std::memcpy(&f, y + e * 4, 4);
    return f;
  }

 private:
  std::vector<uint8_t> row_bytes_of(int64_t r, int64_t chunk) const {
    std::vector<uint8_t> out(static_cast<size_t>(row_bytes()));
    for (int64_t g = 0; g < s_.groups; ++g)
      for (int64_t j = 0; j < s_.n; ++j) {
        const float* x = &x_vals_[static_cast<size_t>((r * s_.groups + g) * s_.k)];
        const float* w = &w_vals_[static_cast<size_t>((g * s_.n + j) * s_.k)];
        float total = 0.0f;
        for (int64_t c0 = 0; c0 < s_.k; c0 += chunk) {
          float partial = 0.0f;
          for (int64_t c = c0; c < std::min(c0 + chunk, s_.k); ++c) partial = std::fma(x[c], w[c], partial);
          total = total + partial;
        }
        uint8_t* dst = &out[static_cast<size_t>((g * s_.n + j) * ysize_)];
        if (y_bf16_) {
          const uint16_t b = float_to_bf16(total);
          std::memcpy(dst, &b, 2);
        } else {
          std::memcpy(dst, &total, 4);
        }
      }
    return out;
  }

  GemmWeight w_type_;
  bool x_bf16_, y_bf16_;
  Shape s_;
  int64_t m_, xsize_, ysize_, ldx_;
  int64_t scale_ld_ = 0;
  std::vector<float> x_vals_, w_vals_, scales_;
  std::unique_ptr<DeviceBuffer<uint8_t>> dx_, dw_, dy_;
  std::unique_ptr<DeviceBuffer<float>> dscale_;
  uint8_t *x_ptr_ = nullptr, *w_ptr_ = nullptr;
};

// Index of the first element (of `elem_size` bytes) where a and b differ, -1 if none.
int64_t first_difference(const uint8_t* a, const uint8_t* b, int64_t elems, int64_t elem_size) {
  for (int64_t e = 0; e < elems; ++e)
    if (std::memcmp(a + e * elem_size, b + e * elem_size, static_cast<size_t>(elem_size)) != 0) return e;
  return -1;
}

using Param = std::tuple<GemmWeight, bool, Shape>;

class SimpleGemmCuda : public ::testing::TestWithParam<Param> {};

// Bitwise agreement is expected, not just closeness: the kernels and the reference perform the
// same IEEE-754 binary32 operations (fmaf == std::fma, __fadd_rn == float +, __fmul_rn == float *,
// all round to nearest even, subnormals kept on both sides) on the same operands in the same order.
TEST_P(SimpleGemmCuda, KernelsAndRowSlicesMatchTheCanonicalOrderBitForBit) {
  DSV4_SKIP_WITHOUT_GPU();
  const auto& [w_type, x_bf16, shape] = GetParam();
  const int64_t m = 300;
  Problem pb(w_type, x_bf16, false, shape, m,
             static_cast<uint32_t>(shape.n * 131 + shape.k * 7 + shape.groups + static_cast<int>(w_type) * 3 + x_bf16));
  const int64_t elem = 4, row_elems = pb.row_elems();

  // The host reference on every 8th row and the last (all rows would cost seconds of CPU); the
  // passes below compare every row with this one.
  std::vector<int64_t> checked;
  for (int64_t r = 0; r < m; r += 8) checked.push_back(r);
  checked.push_back(m - 1);
  const std::vector<uint8_t> tiled = pb.run(SimpleGemmKernel::kTiled, {m}, 0xa0);
  for (const int64_t r : checked) {
    const std::vector<uint8_t> want = pb.reference_row(r);
    const int64_t e = first_difference(tiled.data() + r * pb.row_bytes(), want.data(), row_elems, elem);
    ASSERT_EQ(e, -1) << "tiled vs host reference, " << pb.describe(tiled, r * row_elems + e) << ", want "
                     << pb.value_at(want.data(), e);
  }
  if (shape.k > kernels::kSimpleGemmChunk) {  // the check can tell the orders apart
    EXPECT_NE(first_difference(tiled.data(), pb.single_chain_row(0).data(), row_elems, elem), -1)
        << "row 0 equals a single fma chain over K in every column";
  }

  struct Pass {
    const char* name;
    SimpleGemmKernel kernel;
    std::vector<int64_t> slices;
  };
  const Pass passes[] = {{"GEMV, all rows at once", SimpleGemmKernel::kGemv, {m}},
                         {"auto, one row at a time", SimpleGemmKernel::kAuto, {1}},
                         {"auto, 3 rows at a time", SimpleGemmKernel::kAuto, {3}},
                         {"auto, 16 rows at a time", SimpleGemmKernel::kAuto, {16}},
                         {"auto, slices of 2, 5, 17, 4, 64, 1, 33", SimpleGemmKernel::kAuto, {2, 5, 17, 4, 64, 1, 33}},
                         {"GEMV, 7 rows at a time", SimpleGemmKernel::kGemv, {7}},
                         {"tiled, 50 rows at a time", SimpleGemmKernel::kTiled, {50}}};
  uint8_t poison = 0xa1;  // a new byte each pass: an output no pass writes cannot match
  for (const Pass& pass : passes) {
    const std::vector<uint8_t> got = pb.run(pass.kernel, pass.slices, poison++);
    const int64_t e = first_difference(got.data(), tiled.data(), m * row_elems, elem);
    EXPECT_EQ(e, -1) << pass.name << " vs tiled, all rows at once: " << pb.describe(got, e) << ", want "
                     << pb.value_at(tiled.data(), e);
  }
}

std::vector<Shape> shapes() {
  return {
      {256, 4096, 1, 0, false},  // MoE gate
      {64, 4096, 1, 0, false},   // indexer weights_proj: few rows
      {70, 1008, 1, 0, false},   // K % 64 = 48: a short last chunk; N not a multiple of the GEMV's rows per block
      {40, 197, 1, 0, false},    // K % 8 != 0: no 16-byte rows at all
      {128, 512, 8, 0, false},   // grouped, 8 groups; e4m3 scale rows 0..7
      {96, 384, 2, 8, false},    // padded x rows, still 16-byte aligned
      {96, 384, 2, 3, true},     // misaligned x and w
  };
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [w, x_bf16, s] = info.param;
  std::string name = std::string(weight_name(w)) + "w_" + (x_bf16 ? "bf16" : "f32") + "x_n" + std::to_string(s.n) +
                     "_k" + std::to_string(s.k) + "_g" + std::to_string(s.groups);
  if (s.ldx_pad) name += "_pad" + std::to_string(s.ldx_pad);
  if (s.offset) name += "_offset";
  return name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SimpleGemmCuda,
                         ::testing::Combine(::testing::Values(GemmWeight::kF32, GemmWeight::kBF16, GemmWeight::kE4M3),
                                            ::testing::Bool(), ::testing::ValuesIn(shapes())),
                         param_name);

// K = 768 chunks: the GEMV's partials for 16 x rows no longer fit in shared memory, so kAuto tiles
// at m = 5 and takes the GEMV at m = 1 (1 x row); both still match the reference bit for bit.
TEST(SimpleGemmCudaLongK, TooLongForTheGemvAtM16TilesWithTheSameBits) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 5;
  const Shape shape{8, 768 * kernels::kSimpleGemmChunk, 1, 0, false};
  Problem pb(GemmWeight::kBF16, true, false, shape, m, 11);
  const std::vector<uint8_t> batch = pb.run(SimpleGemmKernel::kAuto, {m}, 0xa0);
  const std::vector<uint8_t> rows = pb.run(SimpleGemmKernel::kAuto, {1}, 0xa1);
  for (int64_t r = 0; r < m; ++r) {
    const std::vector<uint8_t> want = pb.reference_row(r);
    const int64_t e = first_difference(batch.data() + r * pb.row_bytes(), want.data(), pb.row_elems(), 4);
    ASSERT_EQ(e, -1) << "m=5 vs host reference, " << pb.describe(batch, r * pb.row_elems() + e);
  }
  const int64_t e = first_difference(rows.data(), batch.data(), m * pb.row_elems(), 4);
  EXPECT_EQ(e, -1) << "one row at a time vs m=5: " << pb.describe(rows, e);
  EXPECT_THROW(pb.run(SimpleGemmKernel::kGemv, {m}, 0xa2), UsageError);
}

// bf16 outputs (grouped_linear's usual y): the fp32 total rounded once, the same from both kernels.
TEST(SimpleGemmCudaBf16Out, BothKernelsRoundTheCanonicalTotal) {
  DSV4_SKIP_WITHOUT_GPU();
  const int64_t m = 40;
  const Shape shape{128, 512, 8, 0, false};
  Problem pb(GemmWeight::kE4M3, true, true, shape, m, 12);
  const std::vector<uint8_t> tiled = pb.run(SimpleGemmKernel::kTiled, {m}, 0xa0);
  for (int64_t r = 0; r < m; ++r) {
    const std::vector<uint8_t> want = pb.reference_row(r);
    const int64_t e = first_difference(tiled.data() + r * pb.row_bytes(), want.data(), pb.row_elems(), 2);
    ASSERT_EQ(e, -1) << "tiled vs host reference, " << pb.describe(tiled, r * pb.row_elems() + e);
  }
  for (const int64_t slice : {int64_t{1}, int64_t{4}, m}) {
    const std::vector<uint8_t> gemv = pb.run(SimpleGemmKernel::kGemv, {slice}, static_cast<uint8_t>(0xa0 + slice));
    const int64_t e = first_difference(gemv.data(), tiled.data(), m * pb.row_elems(), 2);
    EXPECT_EQ(e, -1) << "GEMV, " << slice << " rows at a time, vs tiled: " << pb.describe(gemv, e);
  }
}

// The kernel choice is host logic: no GPU needed.
TEST(SimpleGemmArgs, ChoiceFollowsTheDocumentedRule) {
  const auto choice = [](int64_t m, int64_t n, int64_t k, int64_t groups, SimpleGemmKernel kernel) {
    kernels::SimpleGemmParams p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.groups = groups;
    p.kernel = kernel;
    return kernels::simple_gemm_choice(p);
  };
  const auto kAuto = SimpleGemmKernel::kAuto, kGemv = SimpleGemmKernel::kGemv, kTiled = SimpleGemmKernel::kTiled;
  EXPECT_EQ(choice(1, 256, 4096, 1, kAuto), kGemv);
  EXPECT_EQ(choice(16, 4096, 4096, 8, kAuto), kGemv);     // m <= 16 whatever the tiles
  EXPECT_EQ(choice(64, 256, 4096, 1, kAuto), kGemv);      // 2^26 multiply-adds
  EXPECT_EQ(choice(64, 1024, 4096, 8, kAuto), kTiled);    // 2^31
  EXPECT_EQ(choice(4096, 1024, 4096, 8, kAuto), kTiled);
  EXPECT_EQ(choice(1, 256, 4096, 1, kTiled), kTiled);
  EXPECT_EQ(choice(4096, 1024, 4096, 8, kGemv), kGemv);
  // 768 chunks: 16 x rows' partials pass 48 KiB, one x row's do not.
  const int64_t long_k = 768 * kernels::kSimpleGemmChunk;
  EXPECT_EQ(choice(5, 8, long_k, 1, kAuto), kTiled);
  EXPECT_EQ(choice(1, 8, long_k, 1, kAuto), kGemv);
  EXPECT_EQ(choice(16, 8, long_k - kernels::kSimpleGemmChunk, 1, kGemv), kGemv);
  EXPECT_THROW(choice(16, 8, long_k, 1, kGemv), UsageError);
}

TEST(SimpleGemmArgs, GemvRejectsPartialsBeyondSharedMemory) {
  kernels::SimpleGemmParams p;
  p.m = 16;
  p.n = 1;
  p.k = 768 * kernels::kSimpleGemmChunk;
  p.kernel = SimpleGemmKernel::kGemv;
  EXPECT_THROW(kernels::simple_gemm(p, nullptr), UsageError);  // before any launch: no GPU needed
}

}  // namespace
}  // namespace dsv4
