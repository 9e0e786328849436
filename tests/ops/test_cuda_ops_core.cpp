// CudaOps' memory, weight loading, elementwise, linear and mHC ops against CpuOps: the same
// random inputs through both backends, GPU outputs poisoned (NaN bytes) before each run, and the
// results compared bit for bit where the GPU repeats the CPU's arithmetic, or within a stated
// bound where the summation order differs. Every comparison prints a "[measure]" line with its
// error. Skips where no GPU exists (except the no-device constructor check, which runs there).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/quant.h"
#include "kernels/elementwise/elementwise.h"
#include "sampling/logit_edit.h"
#include "sampling/token_draw.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using cpu::CpuOps;
using cuda::CudaOps;

constexpr double kBf16Ulp = 1.0 / 128;  // one bf16 ulp, relative to the value (worst case)

// The same tensor in both backends.
struct Both {
  DeviceTensor cpu;
  DeviceTensor gpu;
};

struct BothWeights {
  Weight cpu;
  Weight gpu;
};

std::vector<float> floats_of(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[i] = t.dtype() == DType::kBF16 ? bf16_to_float(t.data<uint16_t>()[i]) : t.data<float>()[i];
  return out;
}

// Elementwise comparison of want (CPU) and got (GPU) against a per-element tolerance.
struct Comparison {
  double max_abs = 0;
  double rel_fro = 0;
  double worst_ratio = 0;  // max |got - want| / tol
  int64_t worst = -1;
  int64_t differing = 0;
  int64_t n = 0;
};

Comparison compare(const std::vector<float>& want, const std::vector<float>& got,
                   const std::function<double(int64_t)>& tol) {
  Comparison c;
  c.n = static_cast<int64_t>(want.size());
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < c.n; ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double ratio = std::isnan(got[i]) ? INFINITY : (d == 0 ? 0.0 : d / tol(i));
    if (got[i] != want[i]) ++c.differing;
    c.max_abs = std::max(c.max_abs, d);
    if (ratio > c.worst_ratio) {
      c.worst_ratio = ratio;
      c.worst = i;
    }
    err2 += d * d;
    ref2 += static_cast<double>(want[i]) * want[i];
  }
  c.rel_fro = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return c;
}

void expect_within(const std::string& what, const std::vector<float>& want, const std::vector<float>& got,
                   const std::function<double(int64_t)>& tol) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const Comparison c = compare(want, got, tol);
  std::printf("[measure] %-44s max|d| %.3g  rel_fro %.3g  max d/tol %.3g  differing %lld/%lld\n", what.c_str(),
              c.max_abs, c.rel_fro, c.worst_ratio, static_cast<long long>(c.differing), static_cast<long long>(c.n));
  EXPECT_LE(c.worst_ratio, 1.0) << what << ": element " << c.worst << " is " << got[c.worst] << ", CPU "
                                << want[c.worst] << ", tolerance " << tol(c.worst);
}

// The last row of a 2-D tensor, as a tensor of one row.
Tensor last_row(const Tensor& t) {
  Tensor row(t.dtype(), {1, t.shape()[1]});
  std::memcpy(row.data<std::byte>(), t.data<std::byte>() + t.nbytes() - row.nbytes(), row.nbytes());
  return row;
}

void expect_same_bits(const std::string& what, const Tensor& want, const Tensor& got) {
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  ASSERT_EQ(want.shape(), got.shape()) << what;
  const size_t es = dtype_size(want.dtype());
  int64_t differing = 0, first = -1;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::memcmp(want.data<std::byte>() + i * es, got.data<std::byte>() + i * es, es) != 0) {
      if (first < 0) first = i;
      ++differing;
    }
  std::printf("[measure] %-44s bit-exact check: differing %lld/%lld\n", what.c_str(),
              static_cast<long long>(differing), static_cast<long long>(want.numel()));
  if (differing > 0 && (want.dtype() == DType::kF32 || want.dtype() == DType::kBF16)) {
    const std::vector<float> w = floats_of(want), g = floats_of(got);
    ADD_FAILURE() << what << ": " << differing << " elements differ, first " << first << ": GPU " << g[first]
                  << ", CPU " << w[first];
  } else {
    EXPECT_EQ(differing, 0) << what << ": first differing element " << first;
  }
}

std::string dtype_tag(DType t) { return t == DType::kBF16 ? "bf16" : "f32"; }

class CudaOpsCore : public ::testing::Test {
 protected:
  void SetUp() override {
    DSV4_SKIP_WITHOUT_GPU();
    gpu_ = std::make_unique<CudaOps>();
  }

  // Normal values times `scale`, stored as dtype (rounded once).
  Tensor random_tensor(DType dtype, Shape shape, float scale = 1.0f) {
    Tensor t(dtype, std::move(shape));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float v = normal(rng_) * scale;
      if (dtype == DType::kBF16) t.data<uint16_t>()[i] = float_to_bf16(v);
      else t.data<float>()[i] = v;
    }
    return t;
  }

  Tensor int_tensor(Shape shape, int32_t lo, int32_t hi) {
    Tensor t(DType::kI32, std::move(shape));
    std::uniform_int_distribution<int32_t> dist(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = dist(rng_);
    return t;
  }

  Both upload_both(const Tensor& host) {
    Both b{cpu_.alloc(host.dtype(), host.shape()), gpu_->alloc(host.dtype(), host.shape())};
    cpu_.upload(host.view(), b.cpu.view());
    gpu_->upload(host.view(), b.gpu.view());
    return b;
  }

  // Fresh outputs: zeros on the CPU, NaN bytes on the GPU (so unwritten elements fail).
  Both outputs(DType dtype, const Shape& shape) {
    Both b{cpu_.alloc(dtype, shape), gpu_->alloc(dtype, shape)};
    DSV4_CUDA_CHECK(cudaMemsetAsync(b.gpu.view().bytes(), 0xff, b.gpu.view().nbytes(), gpu_->stream()));
    return b;
  }

  Tensor download(Ops& ops, const DeviceTensor& t) {
    Tensor host(t.dtype(), t.shape());
    ops.download(t.view(), host.view());
    return host;
  }
  Tensor from_cpu(const DeviceTensor& t) { return download(cpu_, t); }
  Tensor from_gpu(const DeviceTensor& t) { return download(*gpu_, t); }

  BothWeights load_both(const std::string& name, WeightFormat format, const Tensor& w, const Tensor* scale = nullptr) {
    LoadWeightParams p;
    p.name = name;
    p.format = format;
    p.weight = w.view();
    if (scale != nullptr) p.scale = scale->view();
    return {cpu_.load_weight(p), gpu_->load_weight(p)};
  }

  // The values of a GPU FP8 weight: each e4m3 code times its 128x128 block's scale.
  Tensor fp8_values(const Weight& w) {
    const Tensor codes = from_gpu(w.data), block_scales = from_gpu(w.scale);
    const int64_t rows = w.shape[0], cols = w.shape[1], ld = block_scales.shape()[1];
    Tensor values(DType::kF32, {rows, cols});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        values.data<float>()[r * cols + c] =
            e4m3_to_float(codes.data<uint8_t>()[r * cols + c]) * block_scales.data<float>()[(r / 128) * ld + c / 128];
    return values;
  }

  // An FP8 weight as the checkpoint stores it: e4m3 codes and e8m0 128x128 block scales.
  // grouped_linear of bf16 and f32 x [T, G, K] by a random FP8 wo_a-like weight [G * R, K] on the
  // GPU, within a bound of the CPU's result.
  void expect_grouped_linear_near_cpu(int64_t T, int64_t G, int64_t R, int64_t K);

  std::pair<Tensor, Tensor> random_fp8(int64_t n, int64_t k) {
    Tensor w(DType::kF8E4M3, {n, k}), s(DType::kF8E8M0, {(n + 127) / 128, (k + 127) / 128});
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<uint8_t>()[i] = float_to_e4m3(normal(rng_) * 64.0f);
    for (int64_t i = 0; i < s.numel(); ++i) s.data<uint8_t>()[i] = static_cast<uint8_t>(118 + rng_() % 6);
    return {std::move(w), std::move(s)};
  }

  // An MXFP4 weight whose per-32 scales stay within 2^4 of each 128x128 block's largest, so the
  // lossless FP8 cast applies.
  std::pair<Tensor, Tensor> random_mxfp4(int64_t n, int64_t k) {
    Tensor w(DType::kI8, {n, k / 2}), s(DType::kF8E8M0, {n, k / 32});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<uint8_t>()[i] = static_cast<uint8_t>(rng_() & 0xff);
    std::vector<int> block_base(static_cast<size_t>(((n + 127) / 128) * ((k + 127) / 128)));
    for (int& b : block_base) b = 116 + static_cast<int>(rng_() % 6);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < k / 32; ++g) {
        const int b = block_base[static_cast<size_t>((r / 128) * ((k + 127) / 128) + g * 32 / 128)];
        s.data<uint8_t>()[r * (k / 32) + g] = static_cast<uint8_t>(b - static_cast<int>(rng_() % 5));
      }
    return {std::move(w), std::move(s)};
  }

  // The linear test: y = x @ w^T through both backends, checked against a bound built from the
  // exact weight values (the CPU's fp32 copy) and x as the GEMM sees it.
  void check_linear(const std::string& what, const BothWeights& w, int64_t m, DType x_dtype, DType y_dtype,
                    ActQuant q, bool tensor_cores) {
    const int64_t n = w.cpu.shape[0], k = w.cpu.shape[1];
    const Tensor x = random_tensor(x_dtype, {m, k}, 2.0f);
    const Both xs = upload_both(x);
    const Both y = outputs(y_dtype, {m, n});
    cpu_.linear({xs.cpu.view(), &w.cpu, q, y.cpu.view()});
    gpu_->linear({xs.gpu.view(), &w.gpu, q, y.gpu.view()});
    const std::vector<float> want = floats_of(from_cpu(y.cpu)), got = floats_of(from_gpu(y.gpu));

    // sum_k |x_k w_k| with x quantised as the op quantises it.
    std::vector<float> xq = floats_of(x);
    if (q == ActQuant::kFp8Block128)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t b = 0; b < k; b += 128) fake_quant_block_e4m3(&xq[r * k + b], static_cast<int>(std::min<int64_t>(128, k - b)));
    const float* wv = w.cpu.data.view().data<float>();
    std::vector<double> magnitude(static_cast<size_t>(m * n));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double mag = 0;
        for (int64_t i = 0; i < k; ++i) mag += std::fabs(static_cast<double>(xq[r * k + i]) * wv[c * k + i]);
        magnitude[r * n + c] = mag;
      }
    // fp32 FMA chains against BLAS: both within ~sqrt(k) fp32 ulps of sum |products|. FP8 tensor
    // cores accumulate each 128-wide K block with reduced precision (test_fp8_gemm_cuda.cpp's
    // bound), and both sides round to bf16 at the end.
    const double rel_acc = tensor_cores ? 1e-4 : 2e-5;
    const double rounding = y_dtype == DType::kBF16 ? (tensor_cores ? 2 * kBf16Ulp : kBf16Ulp) : 0.0;
    expect_within(what, want, got, [&](int64_t i) {
      return rel_acc * magnitude[i] + rounding * std::fabs(want[i]) + 1e-30;
    });
    if (tensor_cores) {
      const Comparison c = compare(want, got, [](int64_t) { return 1.0; });
      EXPECT_LT(c.rel_fro, 4e-3) << what << ": relative Frobenius error";
    }
  }

  CpuOps cpu_{2};
  std::unique_ptr<CudaOps> gpu_;
  std::mt19937 rng_{20240611};
};

TEST(CudaOpsNoDevice, ConstructorThrowsCudaErrorWithoutADevice) {
  if (cuda::device_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(CudaOps(), CudaError);
}

// ---- memory and weights -----------------------------------------------------------------------

TEST_F(CudaOpsCore, AllocIsZeroFilledAndTransfersRoundTrip) {
  const DeviceTensor t = gpu_->alloc(DType::kF32, {37, 5});
  const Tensor zeros = from_gpu(t);
  for (int64_t i = 0; i < zeros.numel(); ++i) ASSERT_EQ(zeros.data<float>()[i], 0.0f) << i;
  const Tensor host = random_tensor(DType::kBF16, {3, 300});
  const DeviceTensor u = gpu_->alloc(DType::kBF16, {3, 300});
  gpu_->upload(host.view(), u.view());
  expect_same_bits("upload/download round trip", host, from_gpu(u));
  Tensor wrong(DType::kF32, {3, 300});
  EXPECT_THROW(gpu_->upload(wrong.view(), u.view()), UsageError);
  EXPECT_THROW(gpu_->download(u.view(), wrong.view()), UsageError);
  EXPECT_THROW(gpu_->alloc(DType::kF32, {2, -1}), UsageError);
}

TEST_F(CudaOpsCore, LoadWeightKeepsPlainTensorsAsStoredAndIntegersAsInt32) {
  const Tensor bf = random_tensor(DType::kBF16, {7, 33});
  const BothWeights w = load_both("bf", WeightFormat::kPlain, bf);
  EXPECT_EQ(w.gpu.shape, bf.shape());
  EXPECT_EQ(w.gpu.data.dtype(), DType::kBF16);
  expect_same_bits("load_weight plain bf16", bf, from_gpu(w.gpu.data));

  Tensor ids(DType::kI64, {4, 6});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 37) % 256;
  const BothWeights t = load_both("tid2eid", WeightFormat::kPlain, ids);
  EXPECT_EQ(t.gpu.data.dtype(), DType::kI32);
  expect_same_bits("load_weight i64 -> i32", from_cpu(t.cpu.data), from_gpu(t.gpu.data));

  ids.data<int64_t>()[5] = int64_t{1} << 40;
  LoadWeightParams p;
  p.name = "too_big";
  p.weight = ids.view();
  EXPECT_THROW(gpu_->load_weight(p), TensorError);
  const Tensor e8(DType::kF8E8M0, {4});
  p.weight = e8.view();
  EXPECT_THROW(gpu_->load_weight(p), TensorError);
}

TEST_F(CudaOpsCore, LoadWeightKeepsFp8CodesWithCublasLtScales) {
  const auto [codes, scales] = random_fp8(200, 384);
  const BothWeights w = load_both("fp8", WeightFormat::kFp8, codes, &scales);
  EXPECT_EQ(w.gpu.shape, Shape({200, 384}));
  expect_same_bits("load_weight fp8 codes", codes, from_gpu(w.gpu.data));
  const std::vector<float> expected = cuda::fp8_weight_scales_for_cublaslt(scales.data<uint8_t>(), 200, 384);
  const Tensor got = from_gpu(w.gpu.scale);
  ASSERT_EQ(got.shape(), Shape({2, 4}));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(got.data<float>()[i], expected[i]) << i;

  LoadWeightParams p;
  p.name = "fp8";
  p.format = WeightFormat::kFp8;
  p.weight = codes.view();
  const Tensor bad_scale(DType::kF8E8M0, {1, 3});
  p.scale = bad_scale.view();
  EXPECT_THROW(gpu_->load_weight(p), TensorError);
}

TEST_F(CudaOpsCore, LoadWeightCastsMxfp4ToFp8WithTheCpuValues) {
  const auto [packed, scales] = random_mxfp4(160, 256);
  const BothWeights w = load_both("mxfp4", WeightFormat::kMxfp4, packed, &scales);
  EXPECT_EQ(w.gpu.shape, Shape({160, 256}));
  EXPECT_EQ(w.gpu.format, WeightFormat::kMxfp4);
  expect_same_bits("load_weight mxfp4 -> fp8 values", from_cpu(w.cpu.data), fp8_values(w.gpu));
}

TEST_F(CudaOpsCore, DummyWeightsHaveTheCpuValues) {
  // FP8 and MXFP4 (drawn as FP8) linears: codes times the one scale equal the CPU's fp32 values.
  for (const WeightFormat format : {WeightFormat::kFp8, WeightFormat::kMxfp4}) {
    const DummyWeightParams p{"dummy.fp8", format, DType::kBF16, {200, 384}, 12345, 0.0f, 0.05f};
    const Weight cpu = cpu_.dummy_weight(p), gpu = gpu_->dummy_weight(p);
    ASSERT_EQ(gpu.data.dtype(), DType::kF8E4M3);
    EXPECT_EQ(gpu.format, format);
    expect_same_bits("dummy fp8 values", from_cpu(cpu.data), fp8_values(gpu));
  }
  // Plain tensors: stored in their dtype on the GPU, the same values as the CPU's fp32 copy.
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    const DummyWeightParams p{"dummy.plain", WeightFormat::kPlain, dtype, {3, 1000}, 777, 1.0f, 0.5f};
    const Weight cpu = cpu_.dummy_weight(p), gpu = gpu_->dummy_weight(p);
    ASSERT_EQ(gpu.data.dtype(), dtype);
    const std::vector<float> want = floats_of(from_cpu(cpu.data)), got = floats_of(from_gpu(gpu.data));
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << dtype_name(dtype) << " element " << i;
  }
}

// ---- copy, embed, elementwise -------------------------------------------------------------------

TEST_F(CudaOpsCore, CopyConvertsWithTheCpuRounding) {
  for (const auto& [from, to] : {std::pair{DType::kF32, DType::kBF16}, std::pair{DType::kBF16, DType::kF32},
                                std::pair{DType::kF32, DType::kF32}, std::pair{DType::kBF16, DType::kBF16}}) {
    const Tensor src = random_tensor(from, {13, 77}, 3.0f);
    const Both s = upload_both(src);
    const Both d = outputs(to, {77, 13});
    cpu_.copy({s.cpu.view(), d.cpu.view()});
    gpu_->copy({s.gpu.view(), d.gpu.view()});
    expect_same_bits("copy " + dtype_tag(from) + " -> " + dtype_tag(to), from_cpu(d.cpu), from_gpu(d.gpu));
  }
  // Overlapping rows of one tensor (a shift by one row), as memmove does.
  const Tensor src = random_tensor(DType::kF32, {6, 40});
  const Both s = upload_both(src);
  cpu_.copy({slice_rows(s.cpu.view(), 0, 5), slice_rows(s.cpu.view(), 1, 6)});
  gpu_->copy({slice_rows(s.gpu.view(), 0, 5), slice_rows(s.gpu.view(), 1, 6)});
  expect_same_bits("copy overlapping rows", from_cpu(s.cpu), from_gpu(s.gpu));
}

TEST_F(CudaOpsCore, EmbedGathersRowsIntoEveryStream) {
  const int64_t V = 50, D = 96, T = 9, n = 4;
  const BothWeights table = load_both("embed", WeightFormat::kPlain, random_tensor(DType::kBF16, {V, D}));
  const Both ids = upload_both(int_tensor({T}, 0, V - 1));
  for (DType out_dtype : {DType::kBF16, DType::kF32}) {
    const Both out = outputs(out_dtype, {T, n, D});
    cpu_.embed({ids.cpu.view(), &table.cpu, out.cpu.view()});
    gpu_->embed({ids.gpu.view(), &table.gpu, out.gpu.view()});
    expect_same_bits("embed -> " + dtype_tag(out_dtype), from_cpu(out.cpu), from_gpu(out.gpu));
  }
}

// The id is found on the device, so the error comes from the next synchronisation (every
// download is one), naming the id; the backend is usable afterwards.
TEST_F(CudaOpsCore, EmbedRejectsAnIdOutsideTheVocabulary) {
  const BothWeights table = load_both("embed", WeightFormat::kPlain, random_tensor(DType::kBF16, {10, 8}));
  Tensor bad = int_tensor({3}, 0, 9);
  bad.data<int32_t>()[1] = 10;
  const Both ids = upload_both(bad);
  const Both out = outputs(DType::kBF16, {3, 1, 8});
  gpu_->embed({ids.gpu.view(), &table.gpu, out.gpu.view()});
  try {
    gpu_->synchronize();
    ADD_FAILURE() << "token id 10 of a 10-token vocabulary was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("embed: token id 10 is outside the vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(gpu_->synchronize());
}

// A [rows, 4] i64 host tensor of DrawRows, sample_rows' second input.
Tensor draw_rows_tensor(const std::vector<DrawRow>& rows) {
  Tensor t(DType::kI64, {static_cast<int64_t>(rows.size()), 4});
  std::memcpy(t.view().bytes(), rows.data(), rows.size() * sizeof(DrawRow));
  return t;
}

// The CPU's argmax of each row at temperature 0 (greedy decoding on the device): rows of a
// vocabulary's width with ties, NaN first, NaN later, all -inf and all NaN.
TEST_F(CudaOpsCore, GreedySampleRowsMatchTheCpu) {
  const int64_t R = 6, V = 129280;
  Tensor x = random_tensor(DType::kF32, {R, V}, 3.0f);
  float* v = x.data<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  v[0 * V + 70000] = v[0 * V + 90000] = v[0 * V + 5] = 100.0f;  // a three-way tie
  v[1 * V + 0] = nan;                                             // a leading NaN
  v[2 * V + 17] = nan;
  v[2 * V + 129279] = 1000.0f;                                    // the last column wins
  for (int64_t i = 0; i < V; ++i) v[3 * V + i] = -inf;
  for (int64_t i = 0; i < V; ++i) v[4 * V + i] = nan;
  const Both xs = upload_both(x);
  const Both rows = upload_both(draw_rows_tensor(std::vector<DrawRow>(R)));
  const Both out = outputs(DType::kI32, {R});
  cpu_.sample_rows({xs.cpu.view(), rows.cpu.view(), out.cpu.view()});
  gpu_->sample_rows({xs.gpu.view(), rows.gpu.view(), out.gpu.view()});
  expect_same_bits("sample_rows", from_cpu(out.cpu), from_gpu(out.gpu));
  EXPECT_EQ(from_cpu(out.cpu).data<int32_t>()[0], 5);
}

// Logprobs at V4's vocabulary: the CPU's bits (logprob, rank, top ids and logprobs) for rows of
// spread logits with ties, a row where one token holds nearly all the mass, rows with NaN logits
// and one all -inf, top counts from 0 to 20, and a failed draw's id -1.
TEST_F(CudaOpsCore, RowLogprobsMatchTheCpu) {
  const int64_t R = 8, V = 129280, N = kDrawMaxTopLogprobs;
  Tensor x = random_tensor(DType::kF32, {R, V}, 3.0f);
  float* v = x.data<float>();
  for (int64_t i = 0; i < V; ++i) v[1 * V + i] = std::round(v[1 * V + i] * 2.0f) / 2.0f;  // ties
  for (int64_t i = 0; i < V; ++i) v[2 * V + i] = -10.0f;
  v[2 * V + 4242] = 30.0f;  // a dominant token
  v[3 * V + 5] = v[3 * V + 99] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < V; ++i) v[4 * V + i] = -std::numeric_limits<float>::infinity();
  Tensor ids(DType::kI32, {R}), counts(DType::kI32, {R});
  const std::vector<int32_t> id_values = {0, 17, 4242, 5, 3, 129279, -1, 64000};
  const std::vector<int32_t> count_values = {20, 7, 3, 20, 2, 0, 5, 1};
  std::copy(id_values.begin(), id_values.end(), ids.data<int32_t>());
  std::copy(count_values.begin(), count_values.end(), counts.data<int32_t>());
  const Both xs = upload_both(x), id_t = upload_both(ids), count_t = upload_both(counts);
  const Both logprob = outputs(DType::kF32, {R}), rank = outputs(DType::kI32, {R});
  const Both top_ids = outputs(DType::kI32, {R, N}), top_logprobs = outputs(DType::kF32, {R, N});
  cpu_.row_logprobs({xs.cpu.view(), id_t.cpu.view(), count_t.cpu.view(), logprob.cpu.view(), rank.cpu.view(),
                     top_ids.cpu.view(), top_logprobs.cpu.view()});
  gpu_->row_logprobs({xs.gpu.view(), id_t.gpu.view(), count_t.gpu.view(), logprob.gpu.view(), rank.gpu.view(),
                      top_ids.gpu.view(), top_logprobs.gpu.view()});
  expect_same_bits("row_logprobs logprob", from_cpu(logprob.cpu), from_gpu(logprob.gpu));
  expect_same_bits("row_logprobs rank", from_cpu(rank.cpu), from_gpu(rank.gpu));
  expect_same_bits("row_logprobs top_ids", from_cpu(top_ids.cpu), from_gpu(top_ids.gpu));
  expect_same_bits("row_logprobs top_logprobs", from_cpu(top_logprobs.cpu), from_gpu(top_logprobs.gpu));
  EXPECT_EQ(from_cpu(top_ids.cpu).data<int32_t>()[2 * N], 4242);
}

// Dense masks at V4's vocabulary: random masks of three rows of five (the last word partly past
// the vocabulary) give the GPU's logits the CPU's bits.
TEST_F(CudaOpsCore, MaskLogitsMatchTheCpu) {
  const int64_t R = 5, V = 129280 + 7, W = (V + 31) / 32;
  const Tensor x = random_tensor(DType::kF32, {R, V}, 2.0f);
  Tensor allowed(DType::kI32, {3, W}), rows(DType::kI32, {3});
  std::mt19937 rng(12);
  for (int64_t i = 0; i < allowed.numel(); ++i) allowed.data<int32_t>()[i] = static_cast<int32_t>(rng());
  const std::vector<int32_t> row_values = {4, 0, 2};
  std::copy(row_values.begin(), row_values.end(), rows.data<int32_t>());
  const Both xs = upload_both(x), masks = upload_both(allowed), mask_rows = upload_both(rows);
  cpu_.mask_logits({xs.cpu.view(), masks.cpu.view(), mask_rows.cpu.view()});
  gpu_->mask_logits({xs.gpu.view(), masks.gpu.view(), mask_rows.gpu.view()});
  expect_same_bits("mask_logits", from_cpu(xs.cpu), from_gpu(xs.gpu));
}

// Logit edits at V4's vocabulary: a few thousand distinct (row, token) edits of every kind (bias,
// repetition penalty on positive and negative logits, subtraction, bans, and all of them at once)
// change the GPU's logits to the CPU's bits.
TEST_F(CudaOpsCore, EditLogitsMatchTheCpu) {
  const int64_t R = 8, V = 129280;
  const Tensor x = random_tensor(DType::kF32, {R, V}, 4.0f);
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(V - 1));
  std::uniform_real_distribution<float> amount(-3.0f, 3.0f);
  std::vector<LogitEdit> edits;
  for (int32_t row = 0; row < R; ++row) {
    std::set<int32_t> ids;
    while (ids.size() < 500) ids.insert(token(rng));
    int k = 0;
    for (int32_t id : ids) {
      LogitEdit e;
      e.row = row;
      e.id = id;
      e.bias = k % 3 == 0 ? amount(rng) : 0.0f;
      e.subtract = k % 2 == 0 ? amount(rng) : 0.0f;
      e.repetition_penalty = 1.0f + 0.1f * static_cast<float>(row);
      e.flags = (k % 5 == 0 ? LogitEdit::kRepeated : 0u) | (k % 17 == 0 ? LogitEdit::kBanned : 0u);
      edits.push_back(e);
      ++k;
    }
  }
  Tensor edit_words(DType::kI32, {static_cast<int64_t>(edits.size()), 6});
  std::memcpy(edit_words.view().bytes(), edits.data(), edits.size() * sizeof(LogitEdit));
  const Both xs = upload_both(x);
  const Both es = upload_both(edit_words);
  cpu_.edit_logits({xs.cpu.view(), es.cpu.view()});
  gpu_->edit_logits({xs.gpu.view(), es.gpu.view()});
  expect_same_bits("edit_logits", from_cpu(xs.cpu), from_gpu(xs.gpu));
}

// Every path of the draw kernel (greedy, plain, top-k with and without its shortcut's case,
// top-p, min-p, both cuts, a failed row) in a vocabulary of 3,000 that spans several of its
// tiles, small enough for racecheck: the CPU's tokens.
TEST_F(CudaOpsCore, SampledRowsOfEveryKindInASmallVocabulary) {
  const int64_t V = 3000;
  const std::vector<std::tuple<float, float, int32_t, float>> settings = {
      {0.0f, 1.0f, 0, 0.0f},  {1.0f, 1.0f, 0, 0.0f},   {0.8f, 1.0f, 30, 0.0f}, {0.01f, 1.0f, 30, 0.0f},
      {1.2f, 0.7f, 0, 0.0f},  {1.0f, 1.0f, 0, 0.05f},  {0.7f, 0.9f, 200, 0.01f}};
  std::vector<DrawRow> draws;
  for (size_t i = 0; i < settings.size(); ++i) {
    DrawRow d;
    std::tie(d.temperature, d.top_p, d.top_k, d.min_p) = settings[i];
    d.seed = 40 + i;
    d.index = i;
    draws.push_back(d);
  }
  draws.push_back(draws[1]);  // over a row of NaN: no token
  const int64_t R = static_cast<int64_t>(draws.size());
  Tensor x = random_tensor(DType::kF32, {R, V}, 2.0f);
  for (int64_t i = 0; i < V; ++i) x.data<float>()[(R - 1) * V + i] = std::numeric_limits<float>::quiet_NaN();
  const Both xs = upload_both(x);
  const Both rows = upload_both(draw_rows_tensor(draws));
  const Both out = outputs(DType::kI32, {R});
  cpu_.sample_rows({xs.cpu.view(), rows.cpu.view(), out.cpu.view()});
  gpu_->sample_rows({xs.gpu.view(), rows.gpu.view(), out.gpu.view()});
  expect_same_bits("sample_rows (small vocabulary)", from_cpu(out.cpu), from_gpu(out.gpu));
  EXPECT_EQ(from_cpu(out.cpu).data<int32_t>()[R - 1], -1);
}

// Seeded draws at V4's vocabulary: the CPU's tokens (draw_token's) on every row, for logits with
// and without ties (a coarse grid), with a third of the tokens masked out (-inf), at temperatures
// from 0.004 (most weights 0) to 1.7, top-p from 0.05 to 1, top-k from 1 to 5,000, min-p 0 and
// 0.02, and rows without a finite largest logit (-1): 1,408 rows.
TEST_F(CudaOpsCore, SampledRowsMatchTheCpu) {
  const int64_t V = 129280;
  std::mt19937 rng(5);
  std::vector<std::vector<float>> bases;
  for (const float spread : {0.3f, 2.0f, 8.0f})
    for (const int kind : {0, 1, 2}) {  // no ties; ties; ties with a mask
      std::normal_distribution<float> normal(0.0f, spread);
      std::vector<float> base(V);
      for (float& b : base) b = kind > 0 ? std::round(normal(rng) * 2.0f) / 2.0f : normal(rng);
      if (kind == 2)
        for (int64_t i = 0; i < V; i += 3) base[i] = -std::numeric_limits<float>::infinity();
      bases.push_back(std::move(base));
    }
  bases.push_back(std::vector<float>(V, std::numeric_limits<float>::quiet_NaN()));
  bases.push_back(std::vector<float>(V, -std::numeric_limits<float>::infinity()));
  std::vector<DrawRow> draws;
  std::vector<size_t> base_of;
  uint64_t seed = 0;
  for (size_t b = 0; b < bases.size(); ++b)
    for (const float temperature : {0.004f, 0.6f, 1.0f, 1.7f})
      for (const float top_p : {0.05f, 0.6f, 0.95f, 1.0f})
        for (const int32_t top_k : {0, 1, 40, 5000})
          for (const float min_p : {0.0f, 0.02f}) {
            DrawRow d;
            d.seed = seed++;
            d.index = seed % 7;
            d.temperature = temperature;
            d.top_p = top_p;
            d.top_k = top_k;
            d.min_p = min_p;
            draws.push_back(d);
            base_of.push_back(b);
          }
  const int64_t R = static_cast<int64_t>(draws.size());
  Tensor x(DType::kF32, {R, V});
  for (int64_t r = 0; r < R; ++r)
    std::copy(bases[base_of[r]].begin(), bases[base_of[r]].end(), x.data<float>() + r * V);
  const Both xs = upload_both(x);
  const Both rows = upload_both(draw_rows_tensor(draws));
  const Both out = outputs(DType::kI32, {R});
  cpu_.sample_rows({xs.cpu.view(), rows.cpu.view(), out.cpu.view()});
  gpu_->sample_rows({xs.gpu.view(), rows.gpu.view(), out.gpu.view()});
  const Tensor want = from_cpu(out.cpu), got = from_gpu(out.gpu);
  int64_t differ = 0, refused = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int32_t w = want.data<int32_t>()[r], g = got.data<int32_t>()[r];
    if (w != g && ++differ <= 5)
      ADD_FAILURE() << "row " << r << " (base " << base_of[r] << ", T " << draws[r].temperature << ", top_p "
                    << draws[r].top_p << ", top_k " << draws[r].top_k << ", min_p " << draws[r].min_p << "): GPU "
                    << g << ", CPU " << w;
    refused += w < 0 ? 1 : 0;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(refused, 2 * 4 * 4 * 4 * 2);  // the NaN and -inf bases only
}

// Rows land where dst_rows says in each sequence's paged cache (entry j in row j % page_rows of
// page table[j / page_rows], two sequences' pages interleaved in one pool), -1 rows go nowhere,
// and the rest of the pool keeps its bytes: the CPU's result, bit for bit.
TEST_F(CudaOpsCore, WriteCacheRowsMatchesTheCpu) {
  const auto ints = [](std::vector<int32_t> v) {
    Tensor t(DType::kI32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  };
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const Tensor src = random_tensor(dt, {7, 36});
    const Both s = upload_both(src);
    const Both pool = upload_both(random_tensor(dt, {5, 3, 36}));
    const Both table_a = upload_both(ints({4, 0})), table_b = upload_both(ints({2, -1, 3}));
    // a: entries 3, 0 -> page 0 row 0, page 4 row 0; b: entries 8, 2, 1 -> page 3 row 2, page 2
    // rows 2 and 1.
    const Both dst_rows = upload_both(ints({3, -1, 0, 8, -1, 2, 1}));
    const std::vector<CacheRows> cpu_seqs = {{0, 3, {pool.cpu.view(), table_a.cpu.view()}},
                                             {3, 4, {pool.cpu.view(), table_b.cpu.view()}}};
    const std::vector<CacheRows> gpu_seqs = {{0, 3, {pool.gpu.view(), table_a.gpu.view()}},
                                             {3, 4, {pool.gpu.view(), table_b.gpu.view()}}};
    cpu_.write_cache_rows({s.cpu.view(), dst_rows.cpu.view(), cpu_seqs});
    gpu_->write_cache_rows({s.gpu.view(), dst_rows.gpu.view(), gpu_seqs});
    expect_same_bits("write_cache_rows " + dtype_tag(dt) + " paged pool", from_cpu(pool.cpu), from_gpu(pool.gpu));
  }
}

// Entries without a pool row (a -1 page, past the table, a page id outside the pool) are errors
// the CPU throws for; on the GPU, where the plan is data, they are skipped without touching
// memory outside the pool (compute-sanitizer checks that in gpu_run.sh).
TEST_F(CudaOpsCore, WriteCacheRowsSkipsEntriesWithoutAPoolRow) {
  const auto ints = [](std::vector<int32_t> v) {
    Tensor t(DType::kI32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  };
  const Tensor before = random_tensor(DType::kBF16, {2, 2, 16});
  const Both pool = upload_both(before);
  const Both src = upload_both(random_tensor(DType::kBF16, {4, 16}));
  const Both table = upload_both(ints({-1, 1, 7}));
  const Both dst_rows = upload_both(ints({0, 4, 6, 100000}));  // a -1 page, outside the pool, past the table
  const std::vector<CacheRows> seqs = {{0, 4, {pool.gpu.view(), table.gpu.view()}}};
  gpu_->write_cache_rows({src.gpu.view(), dst_rows.gpu.view(), seqs});
  expect_same_bits("write_cache_rows without pool rows", before, from_gpu(pool.gpu));
  const std::vector<CacheRows> cpu_seqs = {{0, 4, {pool.cpu.view(), table.cpu.view()}}};
  EXPECT_THROW(cpu_.write_cache_rows({src.cpu.view(), dst_rows.cpu.view(), cpu_seqs}), UsageError);
}

// Shapes: rows of 1000, of 512 (the indexer's and kv norms') and of 4096, 7000 and 9000 (a block's
// 1024 threads, four or more values a thread), few (a block per row, values in registers up to 8 a
// thread), more (a block per row, 300; rows of 1024-thread blocks on 256 threads, each four
// threads' values, up to 8 a thread: 4096 and 7000, not 9000) and many (a warp per row); the last
// row alone (on a block, values in registers but for 9000) gets the bits it gets in the batch.
TEST_F(CudaOpsCore, RmsNormMatchesWithinTheLastBit) {
  for (const auto& [rows, dim] : {std::pair<int64_t, int64_t>{7, 1000}, {19, 512}, {2, 7000}, {3, 9000}, {300, 1000},
                                  {300, 4096}, {260, 7000}, {260, 9000}, {4096, 1000}, {4100, 512}}) {
    const BothWeights w = load_both("norm", WeightFormat::kPlain, random_tensor(DType::kBF16, {dim}, 0.5f));
    for (DType dt : {DType::kF32, DType::kBF16})
      for (bool weighted : {true, false}) {
        const std::string what = "rms_norm " + std::to_string(rows) + " x " + std::to_string(dim) + " " +
                                 dtype_tag(dt) + (weighted ? " weighted" : " weight-free");
        const Tensor x = random_tensor(dt, {rows, dim}, 3.0f);
        const Both xs = upload_both(x);
        const Both y = outputs(dt, {rows, dim});
        const Weight* wc = weighted ? &w.cpu : nullptr;
        const Weight* wg = weighted ? &w.gpu : nullptr;
        cpu_.rms_norm({xs.cpu.view(), wc, 1e-6f, y.cpu.view()});
        gpu_->rms_norm({xs.gpu.view(), wg, 1e-6f, y.gpu.view()});
        const std::vector<float> want = floats_of(from_cpu(y.cpu));
        // The sum of squares is reduced in another order: the scale may differ in its last bits
        // (a few fp32 ulps; one bf16 ulp where that flips a rounding).
        const double rel = dt == DType::kBF16 ? kBf16Ulp : 2e-6;
        expect_within(what, want, floats_of(from_gpu(y.gpu)),
                      [&](int64_t i) { return rel * std::fabs(want[i]) + 1e-30; });
        // The last row alone: the same bits as in the batch.
        const Both last = upload_both(last_row(x));
        const Both y_last = outputs(dt, {1, dim});
        gpu_->rms_norm({last.gpu.view(), wg, 1e-6f, y_last.gpu.view()});
        expect_same_bits(what + ", last row alone", last_row(from_gpu(y.gpu)), from_gpu(y_last.gpu));
        // In place (y aliasing x), as the model may call it.
        gpu_->rms_norm({xs.gpu.view(), wg, 1e-6f, xs.gpu.view()});
        expect_same_bits(what + " in place", from_gpu(y.gpu), from_gpu(xs.gpu));
      }
  }
}

// Few rows (a block per group of heads: 3 heads in one, V4-Pro's 128 in 4) and 300 (a block a
// row: 3 heads, and 128 with 4 runs or 3 pairs a thread); rotated parts in aligned runs of 8
// values (64 of 192: four pairs a unit) and not (12 of 100: a pair a unit).
TEST_F(CudaOpsCore, RopeIsBitExact) {
  for (const auto& [hd, rd] : {std::pair<int64_t, int64_t>{192, 64}, {100, 12}}) {
    Tensor freq(DType::kF32, {rd / 2});
    for (int64_t i = 0; i < rd / 2; ++i)
      freq.data<float>()[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / rd));
    const Both f = upload_both(freq);
    for (const auto& [rows, heads] : {std::pair<int64_t, int64_t>{6, 3}, {6, 128}, {300, 3}, {300, 128}})
      for (DType dt : {DType::kF32, DType::kBF16})
        for (bool inverse : {false, true}) {
          const Both pos = upload_both(int_tensor({rows}, 0, 200000));
          const Both x = upload_both(random_tensor(dt, {rows, heads, hd}, 2.0f));
          cpu_.rope({x.cpu.view(), pos.cpu.view(), f.cpu.view(), rd, inverse});
          gpu_->rope({x.gpu.view(), pos.gpu.view(), f.gpu.view(), rd, inverse});
          expect_same_bits("rope " + std::to_string(rd) + " of " + std::to_string(hd) + ", " + std::to_string(rows) +
                               " rows of " + std::to_string(heads) + " heads " + dtype_tag(dt) +
                               (inverse ? " inverse" : ""),
                           from_cpu(x.cpu), from_gpu(x.gpu));
        }
  }
}

TEST_F(CudaOpsCore, QuantSimIsBitExact) {
  struct Case {
    QuantFormat format;
    int64_t width, cols, block;
  };
  // Blocks of a power of two from 8 to 256 values take a lane per 8 values (the first four); other
  // blocks a warp each, up to 128 values in registers (96), wider ones read twice (192).
  for (const Case c : {Case{QuantFormat::kE4M3, 512, 448, 64}, Case{QuantFormat::kE2M1, 128, 128, 32},
                       Case{QuantFormat::kE4M3, 384, 384, 128}, Case{QuantFormat::kE4M3, 512, 512, 256},
                       Case{QuantFormat::kE2M1, 520, 480, 96}, Case{QuantFormat::kE4M3, 600, 576, 192}})
    for (DType dt : {DType::kF32, DType::kBF16}) {
      Tensor x = random_tensor(dt, {9, c.width}, 4.0f);
      // A block of tiny values exercises the amax floor; one of zeros the zero block; row 3 spans
      // 2^-40 .. 2^19 (codes down to the subnormals and zero).
      for (int64_t i = 0; i < c.block; ++i) {
        const float tiny = 1e-7f * static_cast<float>(i % 7);
        if (dt == DType::kBF16) {
          x.data<uint16_t>()[c.width + i] = float_to_bf16(tiny);
          x.data<uint16_t>()[2 * c.width + i] = 0;
        } else {
          x.data<float>()[c.width + i] = tiny;
          x.data<float>()[2 * c.width + i] = 0;
        }
      }
      for (int64_t i = 0; i < c.width; ++i) {
        const float wide = std::ldexp(i % 2 ? -1.5f : 1.25f, static_cast<int>(i * 37 % 60) - 40);
        if (dt == DType::kBF16) x.data<uint16_t>()[3 * c.width + i] = float_to_bf16(wide);
        else x.data<float>()[3 * c.width + i] = wide;
      }
      const Both xs = upload_both(x);
      cpu_.quant_sim({xs.cpu.view(), c.cols, c.block, c.format});
      gpu_->quant_sim({xs.gpu.view(), c.cols, c.block, c.format});
      expect_same_bits(std::string("quant_sim ") + (c.format == QuantFormat::kE4M3 ? "e4m3" : "e2m1") + " block " +
                           std::to_string(c.block) + " " + dtype_tag(dt),
                       from_cpu(xs.cpu), from_gpu(xs.gpu));
    }
}

TEST_F(CudaOpsCore, HadamardIsBitExact) {
  for (int64_t width : {128, 512, 4096})
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const Both x = upload_both(random_tensor(dt, {21, width}));  // 128 wide: rows in 3 blocks, a warp each
      cpu_.hadamard({x.cpu.view()});
      gpu_->hadamard({x.gpu.view()});
      expect_same_bits("hadamard " + std::to_string(width) + " " + dtype_tag(dt), from_cpu(x.cpu), from_gpu(x.gpu));
    }
}

// norm_rope_quant as the model calls it at V4-Flash's geometry (the kv and q paths, the two
// compressors' entries from fp32, the indexer's queries), in one launch up to 4,095 vectors and in
// separate launches above: the bits of the separate ops on the GPU (Ops' default), and where no
// norm sums in another order, the CPU's.
TEST_F(CudaOpsCore, NormRopeQuantGivesTheBitsOfTheOpsInTurn) {
  struct Case {
    const char* what;
    int64_t heads, dim;
    bool norm, weighted, src_f32, hadamard;
    int64_t quant_cols, quant_block;
    QuantFormat format;
  };
  const int64_t rd = 64;
  Tensor freq(DType::kF32, {rd / 2});
  for (int64_t i = 0; i < rd / 2; ++i)
    freq.data<float>()[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / rd));
  const Both f = upload_both(freq);
  const Case cases[] = {
      {"kv", 1, 512, true, true, false, false, 448, 64, QuantFormat::kE4M3},
      {"q", 64, 512, true, false, false, false, 0, 0, QuantFormat::kE4M3},
      {"compressor entry", 1, 512, true, true, true, false, 448, 64, QuantFormat::kE4M3},
      {"indexer key", 1, 128, true, true, true, true, 128, 32, QuantFormat::kE2M1},
      {"indexer q", 64, 128, false, false, false, true, 128, 32, QuantFormat::kE2M1},
  };
  for (const Case& c : cases)
    for (int64_t rows : {1, 5, 63, 65})
      for (DType dt : {DType::kBF16, DType::kF32}) {
        const std::string what = std::string("norm_rope_quant ") + c.what + " " + std::to_string(rows) + " rows " +
                                 dtype_tag(dt);
        kernels::NormRopeQuantRowsParams shape;
        shape.vectors = rows * c.heads, shape.dim = c.dim, shape.quant_cols = c.quant_cols;
        shape.quant_block = c.quant_block;
        EXPECT_EQ(kernels::norm_rope_quant_fits(shape), rows * c.heads < 4096) << what << ": the launch expected";
        const BothWeights w = load_both("norm", WeightFormat::kPlain, random_tensor(DType::kBF16, {c.dim}, 0.5f));
        const Tensor x = random_tensor(c.src_f32 ? DType::kF32 : dt, {rows, c.heads, c.dim}, 3.0f);
        const Both pos = upload_both(int_tensor({rows}, 0, 200000));
        const Both src = upload_both(x);
        const Both fused = outputs(dt, {rows, c.heads, c.dim}), in_turn = outputs(dt, {rows, c.heads, c.dim});
        NormRopeQuantParams p{.src = src.gpu.view(),
                              .y = fused.gpu.view(),
                              .norm = c.norm,
                              .norm_weight = c.weighted ? &w.gpu : nullptr,
                              .eps = 1e-6f,
                              .positions = pos.gpu.view(),
                              .inv_freq = f.gpu.view(),
                              .rope_dim = rd,
                              .hadamard = c.hadamard,
                              .quant_cols = c.quant_cols,
                              .quant_block = c.quant_block,
                              .quant_format = c.format};
        gpu_->norm_rope_quant(p);
        p.y = in_turn.gpu.view();
        gpu_->Ops::norm_rope_quant(p);
        expect_same_bits(what, from_gpu(in_turn.gpu), from_gpu(fused.gpu));
        if (!c.norm) {
          NormRopeQuantParams on_cpu = p;
          on_cpu.src = src.cpu.view(), on_cpu.y = fused.cpu.view();
          on_cpu.positions = pos.cpu.view(), on_cpu.inv_freq = f.cpu.view();
          cpu_.norm_rope_quant(on_cpu);
          expect_same_bits(what + " against the CPU", from_cpu(fused.cpu), from_gpu(fused.gpu));
        }
        if (!c.src_f32 && dt == DType::kBF16) {  // in place, as the model calls the q paths
          p.y = src.gpu.view();
          gpu_->norm_rope_quant(p);
          expect_same_bits(what + " in place", from_gpu(fused.gpu), from_gpu(src.gpu));
        }
      }
}

TEST_F(CudaOpsCore, AddBroadcastIsBitExact) {
  const int64_t T = 5, n = 4, D = 300;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Both a = upload_both(random_tensor(dt, {T, n, D}));
    const Both b = upload_both(random_tensor(dt, {T, D}));
    const Both out = outputs(dt, {T, n, D});
    cpu_.add_broadcast({a.cpu.view(), b.cpu.view(), out.cpu.view()});
    gpu_->add_broadcast({a.gpu.view(), b.gpu.view(), out.gpu.view()});
    expect_same_bits("add_broadcast " + dtype_tag(dt), from_cpu(out.cpu), from_gpu(out.gpu));
  }
}

// ---- linears ----------------------------------------------------------------------------------

TEST_F(CudaOpsCore, LinearWithPlainWeights) {
  const BothWeights wb = load_both("w_bf16", WeightFormat::kPlain, random_tensor(DType::kBF16, {200, 300}, 0.1f));
  const BothWeights wf = load_both("w_f32", WeightFormat::kPlain, random_tensor(DType::kF32, {72, 1024}, 0.1f));
  check_linear("linear bf16 w, f32 x -> f32 (exact math)", wb, 9, DType::kF32, DType::kF32, ActQuant::kNone, false);
  check_linear("linear bf16 w, bf16 x -> bf16", wb, 9, DType::kBF16, DType::kBF16, ActQuant::kNone, false);
  check_linear("linear bf16 w, bf16 x -> f32 (gate/head)", wb, 70, DType::kBF16, DType::kF32, ActQuant::kNone, false);
  check_linear("linear f32 w, bf16 x -> bf16", wf, 3, DType::kBF16, DType::kBF16, ActQuant::kNone, false);
  // K a multiple of 128: bf16 tensor cores with fp32 sums, as precise as the fp32 chains.
  const BothWeights wt = load_both("w_bf16_k512", WeightFormat::kPlain, random_tensor(DType::kBF16, {200, 512}, 0.1f));
  check_linear("linear bf16 w, bf16 x -> f32 (tensor cores)", wt, 70, DType::kBF16, DType::kF32, ActQuant::kNone, false);
  check_linear("linear bf16 w, bf16 x -> bf16 (tensor cores)", wt, 9, DType::kBF16, DType::kBF16, ActQuant::kNone,
               false);
  check_linear("linear bf16 w, act-quant f32 x -> f32", wb, 4, DType::kF32, DType::kF32, ActQuant::kFp8Block128,
               false);
}

TEST_F(CudaOpsCore, LinearWithFp8WeightsExactMath) {
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{256, 512}, {200, 300}, {512, 7168}}) {
    const auto [codes, scales] = random_fp8(n, k);
    const BothWeights w = load_both("fp8", WeightFormat::kFp8, codes, &scales);
    check_linear("linear fp8 exact-math n" + std::to_string(n) + " k" + std::to_string(k), w, 5, DType::kF32,
                 DType::kF32, ActQuant::kNone, false);
  }
}

TEST_F(CudaOpsCore, LinearWithFp8WeightsDefaultModeOnTensorCores) {
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 512}, {5, 512, 7168}, {16, 384, 1024},
                               {33, 1536, 4096}}) {
    const auto [codes, scales] = random_fp8(n, k);
    const BothWeights w = load_both("fp8", WeightFormat::kFp8, codes, &scales);
    check_linear("linear fp8 default m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k), w,
                 m, DType::kBF16, DType::kBF16, ActQuant::kFp8Block128, true);
  }
}

TEST_F(CudaOpsCore, LinearWithFp8WeightsAndQuantisedActivationsOffTheTensorCores) {
  // f32 x or y, or K not a multiple of 128 (its last block is a short one): the plain GEMM on
  // activations quantised exactly as the CPU quantises them.
  const auto [c1, s1] = random_fp8(256, 384);
  const BothWeights w1 = load_both("fp8", WeightFormat::kFp8, c1, &s1);
  check_linear("linear fp8 act-quant bf16 x -> f32", w1, 6, DType::kBF16, DType::kF32, ActQuant::kFp8Block128, false);
  check_linear("linear fp8 act-quant f32 x -> bf16", w1, 6, DType::kF32, DType::kBF16, ActQuant::kFp8Block128, false);
  const auto [c2, s2] = random_fp8(136, 200);
  const BothWeights w2 = load_both("fp8", WeightFormat::kFp8, c2, &s2);
  check_linear("linear fp8 act-quant k200 -> bf16", w2, 6, DType::kBF16, DType::kBF16, ActQuant::kFp8Block128, false);
}

TEST_F(CudaOpsCore, LinearWithMxfp4Weights) {
  const auto [packed, scales] = random_mxfp4(256, 512);
  const BothWeights w = load_both("mxfp4", WeightFormat::kMxfp4, packed, &scales);
  check_linear("linear mxfp4 exact-math", w, 7, DType::kF32, DType::kF32, ActQuant::kNone, false);
  check_linear("linear mxfp4 default (tensor cores)", w, 7, DType::kBF16, DType::kBF16, ActQuant::kFp8Block128, true);
}

TEST_F(CudaOpsCore, LinearRowsDoNotDependOnTheBatchAndRunsRepeat) {
  const auto [codes, scales] = random_fp8(320, 640);
  const BothWeights fp8 = load_both("fp8", WeightFormat::kFp8, codes, &scales);
  const BothWeights bf16 = load_both("bf16", WeightFormat::kPlain, random_tensor(DType::kBF16, {320, 640}, 0.1f));
  const Tensor x = random_tensor(DType::kBF16, {37, 640});
  const Both xs = upload_both(x);
  struct Case {
    const BothWeights* w;
    ActQuant q;
    const char* what;
    bool batch_independent;  // promised for the plain GEMM and the bf16 tensor cores
  };
  for (const Case& c : {Case{&fp8, ActQuant::kNone, "plain GEMM", true},
                        Case{&fp8, ActQuant::kFp8Block128, "FP8 tensor cores", false},
                        Case{&bf16, ActQuant::kNone, "bf16 tensor cores", true}}) {
    const std::string what = c.what;
    const Both all = outputs(DType::kBF16, {37, 320}), again = outputs(DType::kBF16, {37, 320});
    gpu_->linear({xs.gpu.view(), &c.w->gpu, c.q, all.gpu.view()});
    gpu_->linear({xs.gpu.view(), &c.w->gpu, c.q, again.gpu.view()});
    expect_same_bits("linear repeat, " + what, from_gpu(all.gpu), from_gpu(again.gpu));
    if (c.batch_independent) {
      const Both few = outputs(DType::kBF16, {5, 320});
      gpu_->linear({slice_rows(ConstTensorView(xs.gpu.view()), 10, 15), &c.w->gpu, c.q, few.gpu.view()});
      Tensor rows(DType::kBF16, {5, 320});
      std::memcpy(rows.data<uint16_t>(), from_gpu(all.gpu).data<uint16_t>() + 10 * 320, rows.nbytes());
      expect_same_bits("linear rows 10..14 alone, " + what, rows, from_gpu(few.gpu));
    }
  }
}

// Two linears of one x (Ops::linears, one launch on the GPU for FP8 or bf16 pairs) give the bits
// of two linear() calls, at decode sizes (the pair path), past them (linear() calls) and at
// prefill sizes on the WGMMA kernels (x quantised or re-laid once for both GEMMs: 640 rows of the
// wide weights, 40+ tiles of 128 x 128 each).
TEST_F(CudaOpsCore, LinearPairsGiveTheBitsOfSeparateLinears) {
  const auto [codes_a, scales_a] = random_fp8(320, 2048);
  const auto [codes_b, scales_b] = random_fp8(136, 2048);
  const auto [codes_wa, scales_wa] = random_fp8(1280, 2048);
  const auto [codes_wb, scales_wb] = random_fp8(1040, 2048);
  const BothWeights fa = load_both("fa", WeightFormat::kFp8, codes_a, &scales_a);
  const BothWeights fb = load_both("fb", WeightFormat::kFp8, codes_b, &scales_b);
  const BothWeights fwa = load_both("fwa", WeightFormat::kFp8, codes_wa, &scales_wa);
  const BothWeights fwb = load_both("fwb", WeightFormat::kFp8, codes_wb, &scales_wb);
  const BothWeights ba = load_both("ba", WeightFormat::kPlain, random_tensor(DType::kBF16, {264, 2048}, 0.1f));
  const BothWeights bb = load_both("bb", WeightFormat::kPlain, random_tensor(DType::kBF16, {40, 2048}, 0.1f));
  const BothWeights bwa = load_both("bwa", WeightFormat::kPlain, random_tensor(DType::kBF16, {1280, 2048}, 0.1f));
  const BothWeights bwb = load_both("bwb", WeightFormat::kPlain, random_tensor(DType::kBF16, {1040, 2048}, 0.1f));
  struct Case {
    const BothWeights* a;
    const BothWeights* b;
    ActQuant q;
    DType y;
    const char* what;
  };
  for (const int64_t m : {1, 5, 16, 40, 70, 640}) {
    const Both xs = upload_both(random_tensor(DType::kBF16, {m, 2048}));
    const bool wide = m >= 512;
    for (const Case& c : {Case{wide ? &fwa : &fa, wide ? &fwb : &fb, ActQuant::kFp8Block128, DType::kBF16, "FP8 pair"},
                          Case{wide ? &bwa : &ba, wide ? &bwb : &bb, ActQuant::kNone, DType::kF32, "bf16 pair"}}) {
      const int64_t na = c.a->gpu.shape[0], nb = c.b->gpu.shape[0];
      const Both ya = outputs(c.y, {m, na}), yb = outputs(c.y, {m, nb});
      const Both sa = outputs(c.y, {m, na}), sb = outputs(c.y, {m, nb});
      const LinearOut outs[2] = {{&c.a->gpu, c.q, ya.gpu.view()}, {&c.b->gpu, c.q, yb.gpu.view()}};
      gpu_->linears({xs.gpu.view(), outs});
      gpu_->linear({xs.gpu.view(), &c.a->gpu, c.q, sa.gpu.view()});
      gpu_->linear({xs.gpu.view(), &c.b->gpu, c.q, sb.gpu.view()});
      const std::string what = std::string(c.what) + ", m=" + std::to_string(m);
      expect_same_bits(what + ", first output", from_gpu(sa.gpu), from_gpu(ya.gpu));
      expect_same_bits(what + ", second output", from_gpu(sb.gpu), from_gpu(yb.gpu));
    }
  }
}

// --fp8-gemm chained (CudaOptions::fp8_gemm kChained): prefill-sized FP8 linears (640 rows) take
// the chained kernel, other bits than the default's but as precise (their relative Frobenius
// distance to the default's fp32 outputs within 2e-7), a pair of linears of one x, quantised once
// for both, gives the bits of two linear() calls, and a row's bits do not depend on its batch.
TEST_F(CudaOpsCore, ChainedLinearsAgreeWithTheDefaultAndPairsGiveTheirBits) {
  cuda::CudaOps chained(cuda::CudaOptions{.fp8_gemm = cuda::Fp8Gemm::kChained, .multi_stream = {}});
  const int64_t m = 640, k = 2048;
  const auto [codes_a, scales_a] = random_fp8(1280, k);
  const auto [codes_b, scales_b] = random_fp8(1040, k);
  const auto load = [&](Ops& ops, const char* name, const Tensor& codes, const Tensor& scales) {
    LoadWeightParams p;
    p.name = name;
    p.format = WeightFormat::kFp8;
    p.weight = codes.view();
    p.scale = scales.view();
    return ops.load_weight(p);
  };
  const Weight wa = load(*gpu_, "a", codes_a, scales_a), wb = load(*gpu_, "b", codes_b, scales_b);
  const Weight ca = load(chained, "a", codes_a, scales_a), cb = load(chained, "b", codes_b, scales_b);
  const Tensor x = random_tensor(DType::kBF16, {m, k});
  const DeviceTensor gx = gpu_->alloc(DType::kBF16, {m, k}), cx = chained.alloc(DType::kBF16, {m, k});
  gpu_->upload(x.view(), gx.view());
  chained.upload(x.view(), cx.view());
  const auto run = [&](Ops& ops, const DeviceTensor& xd, const Weight& w) {
    DeviceTensor y = ops.alloc(DType::kF32, {m, w.shape[0]});
    ops.linear({xd.view(), &w, ActQuant::kFp8Block128, y.view()});
    return download(ops, y);
  };
  for (const auto& [w, c, name] : {std::tuple{&wa, &ca, "a"}, std::tuple{&wb, &cb, "b"}}) {
    const Tensor want = run(*gpu_, gx, *w), got = run(chained, cx, *c);
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double d = double(got.data<float>()[i]) - want.data<float>()[i];
      err2 += d * d;
      ref2 += double(want.data<float>()[i]) * want.data<float>()[i];
    }
    const double rel = std::sqrt(err2 / ref2);
    std::printf("[measure] chained linear %s, %lld x %lld x %lld: relative Frobenius distance to the default %.3e\n",
                name, static_cast<long long>(m), static_cast<long long>(w->shape[0]), static_cast<long long>(k), rel);
    EXPECT_LT(rel, 2e-7) << "linear " << name;  // measured 8.0e-8 and 8.3e-8 (H100)
    EXPECT_FALSE(std::memcmp(got.data<float>(), want.data<float>(), want.nbytes()) == 0)
        << "linear " << name << ": the default's bits, so the chained kernel did not run";
  }
  DeviceTensor ya = chained.alloc(DType::kF32, {m, 1280}), yb = chained.alloc(DType::kF32, {m, 1040});
  const LinearOut outs[2] = {{&ca, ActQuant::kFp8Block128, ya.view()}, {&cb, ActQuant::kFp8Block128, yb.view()}};
  chained.linears({cx.view(), outs});
  const Tensor whole_a = run(chained, cx, ca), whole_b = run(chained, cx, cb);
  expect_same_bits("chained pair, first output", whole_a, download(chained, ya));
  expect_same_bits("chained pair, second output", whole_b, download(chained, yb));
  // One order at every size: rows alone or in slices give the whole call's bits, as single
  // linears and as pairs; 1 and 5 rows (the chained streamed kernel, a pair in one launch), 130
  // (streamed: too few tiles for the WGMMA kernel) and 400 (the WGMMA kernel below 512 rows).
  for (const auto& [r0, rows] : {std::pair<int64_t, int64_t>{0, 1}, {3, 5}, {100, 130}, {200, 400}}) {
    const ConstTensorView part = slice_rows(ConstTensorView(cx.view()), r0, r0 + rows);
    const auto rows_of = [&](const Tensor& whole, int64_t n) {
      Tensor want(DType::kF32, {rows, n});
      std::memcpy(want.data<float>(), whole.data<float>() + r0 * n, want.nbytes());
      return want;
    };
    DeviceTensor sa = chained.alloc(DType::kF32, {rows, 1280}), sb = chained.alloc(DType::kF32, {rows, 1040});
    DeviceTensor pa = chained.alloc(DType::kF32, {rows, 1280}), pb = chained.alloc(DType::kF32, {rows, 1040});
    chained.linear({part, &ca, ActQuant::kFp8Block128, sa.view()});
    chained.linear({part, &cb, ActQuant::kFp8Block128, sb.view()});
    const LinearOut pair[2] = {{&ca, ActQuant::kFp8Block128, pa.view()}, {&cb, ActQuant::kFp8Block128, pb.view()}};
    chained.linears({part, pair});
    const std::string what = "chained, rows " + std::to_string(r0) + ".." + std::to_string(r0 + rows - 1);
    expect_same_bits(what + " alone, first linear", rows_of(whole_a, 1280), download(chained, sa));
    expect_same_bits(what + " alone, second linear", rows_of(whole_b, 1040), download(chained, sb));
    expect_same_bits(what + " as a pair, first output", rows_of(whole_a, 1280), download(chained, pa));
    expect_same_bits(what + " as a pair, second output", rows_of(whole_b, 1040), download(chained, pb));
  }
}

// A row's bits do not depend on how many rows share the call, also with a K that is not a multiple
// of the kernel's K slice (the zero-padded tail).
// A bf16 linear's rows: simple_gemm (k 200), the bf16 tensor-core kernels (k 4096; streamed for
// few rows, and with 600 x 1100 outputs the bf16 WGMMA kernel for the whole call and the 530-row
// slice): a row's bits do not depend on how many rows share the call.
TEST_F(CudaOpsCore, PlainGemmGivesTheSameBitsForFewAndManyRows) {
  struct Case {
    int64_t k, n, m;
    std::vector<int64_t> slices;  // rows of the calls from row 20 on
  };
  for (const Case& c : {Case{200, 130, 40, {1, 3, 8}}, Case{4096, 130, 40, {1, 3, 8}},
                        Case{4096, 1100, 600, {1, 3, 8, 530}}}) {
    const BothWeights w = load_both("w", WeightFormat::kPlain, random_tensor(DType::kBF16, {c.n, c.k}));
    const Tensor x = random_tensor(DType::kBF16, {c.m, c.k});
    const Both xs = upload_both(x);
    const Both all = outputs(DType::kF32, {c.m, c.n});
    gpu_->linear({xs.gpu.view(), &w.gpu, ActQuant::kNone, all.gpu.view()});
    const Tensor many = from_gpu(all.gpu);
    for (const int64_t rows : c.slices) {
      const Both few = outputs(DType::kF32, {rows, c.n});
      gpu_->linear({slice_rows(ConstTensorView(xs.gpu.view()), 20, 20 + rows), &w.gpu, ActQuant::kNone, few.gpu.view()});
      Tensor want(DType::kF32, {rows, c.n});
      std::memcpy(want.data<float>(), many.data<float>() + 20 * c.n, want.nbytes());
      expect_same_bits("k " + std::to_string(c.k) + ", n " + std::to_string(c.n) + ", " + std::to_string(rows) +
                           " rows",
                       want, from_gpu(few.gpu));
    }
  }
}

TEST_F(CudaOpsCore, LinearRejectsAWeightOfAnotherShape) {
  const BothWeights w = load_both("w", WeightFormat::kPlain, random_tensor(DType::kBF16, {8, 16}));
  const Both x = upload_both(random_tensor(DType::kBF16, {2, 32}));
  const Both y = outputs(DType::kBF16, {2, 8});
  EXPECT_THROW(gpu_->linear({x.gpu.view(), &w.gpu, ActQuant::kNone, y.gpu.view()}), UsageError);
}

// Small shapes: the streamed kernel (6 tokens) and the staged one (70 tokens, two tiles).
TEST_F(CudaOpsCore, GroupedLinearWithFp8Weights) {
  for (const auto [T, G, R, K] : {std::array<int64_t, 4>{6, 4, 64, 256}, std::array<int64_t, 4>{70, 2, 128, 512}})
    expect_grouped_linear_near_cpu(T, G, R, K);
}

void CudaOpsCore::expect_grouped_linear_near_cpu(int64_t T, int64_t G, int64_t R, int64_t K) {
  const auto [codes, scales] = random_fp8(G * R, K);
  const BothWeights w = load_both("wo_a", WeightFormat::kFp8, codes, &scales);
  const float* wv = w.cpu.data.view().data<float>();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor x = random_tensor(dt, {T, G, K});
    const Both xs = upload_both(x);
    const Both y = outputs(dt, {T, G, R});
    cpu_.grouped_linear({xs.cpu.view(), &w.cpu, y.cpu.view()});
    gpu_->grouped_linear({xs.gpu.view(), &w.gpu, y.gpu.view()});
    const std::vector<float> xv = floats_of(x), want = floats_of(from_cpu(y.cpu));
    expect_within("grouped_linear fp8 " + dtype_tag(dt), want, floats_of(from_gpu(y.gpu)), [&](int64_t i) {
      const int64_t t = i / (G * R), g = (i / R) % G, r = i % R;
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(xv[(t * G + g) * K + k]) * wv[(g * R + r) * K + k]);
      return 2e-5 * mag + (dt == DType::kBF16 ? kBf16Ulp : 0.0) * std::fabs(want[i]) + 1e-30;
    });
  }
}

// wo_a's geometry (8 groups of 1024 x 4096 FP8) on the bf16 tensor cores: near the CPU, and a
// token's bits do not depend on how many tokens share the call (chunked prefill == one-shot),
// whichever kernel and tile shape runs it (streamed up to 16 tokens, staged 32- and 64-token tiles
// of 64 rows for decode batches, 128 x 128 from 384 tokens on, bf16 WGMMA from kF16WgmmaMinRows
// (the whole call and the 530-row slice), partial last tiles), with fp32 and bf16 outputs.
TEST_F(CudaOpsCore, GroupedLinearOnTensorCoresAgreesAndGivesTheSameBitsForFewAndManyRows) {
  const int64_t T = 600, G = 8, R = 1024, K = 4096;
  ASSERT_GE(T, cuda::kF16WgmmaMinRows) << "the whole call should take the WGMMA kernel";
  const auto [codes, scales] = random_fp8(G * R, K);
  const BothWeights w = load_both("wo_a", WeightFormat::kFp8, codes, &scales);
  const Tensor x = random_tensor(DType::kBF16, {T, G, K});
  const Both xs = upload_both(x);
  const Both y = outputs(DType::kF32, {T, G, R});
  cpu_.grouped_linear({xs.cpu.view(), &w.cpu, y.cpu.view()});
  gpu_->grouped_linear({xs.gpu.view(), &w.gpu, y.gpu.view()});
  const std::vector<float> want = floats_of(from_cpu(y.cpu)), got = floats_of(from_gpu(y.gpu));
  const Comparison c = compare(want, got, [](int64_t) { return 1.0; });
  std::printf("[measure] grouped_linear wo_a geometry, tensor cores: rel_fro %.3g, max|d| %.3g\n", c.rel_fro, c.max_abs);
  EXPECT_LT(c.rel_fro, 1e-6);
  for (const DType dt : {DType::kF32, DType::kBF16}) {
    const Both all = outputs(dt, {T, G, R});
    gpu_->grouped_linear({xs.gpu.view(), &w.gpu, all.gpu.view()});
    const Tensor many = from_gpu(all.gpu);
    for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{9}, int64_t{17}, int64_t{63}, int64_t{64},
                               int64_t{130}, int64_t{280}, int64_t{400}, int64_t{530}}) {
      const Both few = outputs(dt, {rows, G, R});
      gpu_->grouped_linear({slice_rows(ConstTensorView(xs.gpu.view()), 20, 20 + rows), &w.gpu, few.gpu.view()});
      Tensor part(dt, {rows, G, R});
      std::memcpy(part.data<std::byte>(), many.data<std::byte>() + 20 * G * R * dtype_size(dt), part.nbytes());
      expect_same_bits("grouped_linear, " + dtype_tag(dt) + ", " + std::to_string(rows) + " rows", part,
                       from_gpu(few.gpu));
    }
  }
}

// ---- mHC --------------------------------------------------------------------------------------

struct HcWeightsBoth {
  BothWeights fn, scale, base;
};

class CudaOpsMhc : public CudaOpsCore {
 protected:
  HcWeightsBoth hc_weights(int64_t rows, int64_t width, int64_t scales) {
    Tensor scale(DType::kF32, {scales});
    for (int64_t i = 0; i < scales; ++i) scale.data<float>()[i] = 0.5f + 0.25f * static_cast<float>(i);
    return {load_both("fn", WeightFormat::kPlain, random_tensor(DType::kF32, {rows, width}, 0.05f)),
            load_both("scale", WeightFormat::kPlain, scale),
            load_both("base", WeightFormat::kPlain, random_tensor(DType::kF32, {rows}, 0.5f))};
  }

  // |y - y_cpu| bound for y = sum_j g_j x_j with g in (0, 2]: the weights differ in their last
  // bits (mix projections summed in another order), so the bound scales with sum_j |x_j|.
  std::function<double(int64_t)> stream_sum_tolerance(const Tensor& x, const std::vector<float>& want, int64_t n,
                                                      int64_t D, DType dt) {
    std::vector<float> xv = floats_of(x);
    return [xv = std::move(xv), &want, n, D, dt](int64_t i) {
      const int64_t t = i / D, d = i % D;
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += std::fabs(xv[(t * n + j) * D + d]);
      return 1e-5 * s + (dt == DType::kBF16 ? kBf16Ulp : 0.0) * std::fabs(want[i]) + 1e-30;
    };
  }
};

TEST_F(CudaOpsMhc, HcPreMatchesInBothModes) {
  const int64_t T = 5, n = 4, D = 512, mix = (2 + n) * n;
  const HcWeightsBoth w = hc_weights(mix, n * D, 3);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const std::string tag = std::string(dt == DType::kF32 ? " (exact math)" : " (default)");
    const Tensor x = random_tensor(dt, {T, n, D});
    const Both xs = upload_both(x);
    const Both y = outputs(dt, {T, D}), post = outputs(DType::kF32, {T, n}), comb = outputs(DType::kF32, {T, n, n});
    for (Ops* ops : {static_cast<Ops*>(&cpu_), static_cast<Ops*>(gpu_.get())}) {
      const bool on_cpu = ops == &cpu_;
      const auto& pick = [&](const Both& b) { return on_cpu ? b.cpu.view() : b.gpu.view(); };
      const auto& pickw = [&](const BothWeights& b) { return on_cpu ? &b.cpu : &b.gpu; };
      ops->hc_pre({pick(xs), pickw(w.fn), pickw(w.scale), pickw(w.base), 20, 1e-6f, 1e-6f, pick(y), pick(post),
                   pick(comb)});
    }
    const std::vector<float> want_post = floats_of(from_cpu(post.cpu)), want_comb = floats_of(from_cpu(comb.cpu));
    expect_within("hc_pre post" + tag, want_post, floats_of(from_gpu(post.gpu)), [](int64_t) { return 2e-5; });
    expect_within("hc_pre comb" + tag, want_comb, floats_of(from_gpu(comb.gpu)), [](int64_t) { return 2e-5; });
    const std::vector<float> want_y = floats_of(from_cpu(y.cpu));
    expect_within("hc_pre y" + tag, want_y, floats_of(from_gpu(y.gpu)), stream_sum_tolerance(x, want_y, n, D, dt));
  }
}

// hc_pre's and hc_head's mix partials take a kernel by the token count (2 or 8 mixes a block, or
// the prefill scan with one thread per sum); a token's results are the same bits in a batch of
// each size (300 tokens run hc_pre_finish's Sinkhorn on a slice's warp, 40 on a block of its own,
// one token the fused kernel). D = 1270 gives chunks of 318 elements (two per position, a short
// last chunk), D = 4096 V4-Flash's rows (four per position).
TEST_F(CudaOpsMhc, HcPreAndHeadRowsAreTheSameBitsInAnyBatch) {
  for (const int64_t D : {int64_t{512}, int64_t{1270}, int64_t{4096}}) {
    const int64_t n = 4, mix = (2 + n) * n;
    const HcWeightsBoth w = hc_weights(mix, n * D, 3), head = hc_weights(n, n * D, 1);
    const Tensor x = random_tensor(DType::kBF16, {300, n, D});
    const Both xs = upload_both(x);
    struct Run {
      Both y, post, comb, head_y;
    };
    auto run = [&](int64_t begin, int64_t end) {
      const int64_t T = end - begin;
      Run r{outputs(DType::kBF16, {T, D}), outputs(DType::kF32, {T, n}), outputs(DType::kF32, {T, n, n}),
            outputs(DType::kBF16, {T, D})};
      const ConstTensorView rows = slice_rows(ConstTensorView(xs.gpu.view()), begin, end);
      gpu_->hc_pre({rows, &w.fn.gpu, &w.scale.gpu, &w.base.gpu, 20, 1e-6f, 1e-6f, r.y.gpu.view(), r.post.gpu.view(),
                    r.comb.gpu.view()});
      gpu_->hc_head({rows, &head.fn.gpu, &head.scale.gpu, &head.base.gpu, 1e-6f, 1e-6f, r.head_y.gpu.view()});
      return r;
    };
    const Run all = run(0, 300), some = run(0, 40), one = run(7, 8), last = run(299, 300);
    for (const auto& [what, got, begin] : {std::tuple{"40 tokens", &some, int64_t{0}}, std::tuple{"token 7", &one, int64_t{7}},
                                           std::tuple{"token 299", &last, int64_t{299}}}) {
      const int64_t T = got->post.gpu.view().dim(0);
      for (const auto& [name, a, b] : {std::tuple{"y", &all.y, &got->y}, std::tuple{"post", &all.post, &got->post},
                                       std::tuple{"comb", &all.comb, &got->comb},
                                       std::tuple{"hc_head y", &all.head_y, &got->head_y}}) {
        const Tensor whole = from_gpu(a->gpu);
        const Tensor part = from_gpu(b->gpu);
        const size_t row = whole.nbytes() / 300;
        ASSERT_EQ(std::memcmp(whole.data<std::byte>() + begin * row, part.data<std::byte>(), static_cast<size_t>(T) * row), 0)
            << "D " << D << ": " << name << " of " << what << " differs from the 300-token batch";
      }
    }
  }
}

// hc_pre with the sub-layer's norm gives what hc_pre and then rms_norm give, bit for bit: one
// token in one fused launch (twice in a row: the counters reset), more tokens through the
// separate kernels. D = 4096 is V4-Flash's (the norm's order: 1024 threads), 1270 a norm of 320
// threads that does not divide the row.
TEST_F(CudaOpsMhc, HcPreWithTheNormIsHcPreThenRmsNorm) {
  for (const int64_t D : {int64_t{4096}, int64_t{1270}}) {
    const int64_t n = 4, mix = (2 + n) * n;
    const HcWeightsBoth w = hc_weights(mix, n * D, 3);
    const BothWeights norm = load_both("norm", WeightFormat::kPlain, random_tensor(DType::kF32, {D}));
    for (const DType dt : {DType::kBF16, DType::kF32}) {
      for (const int64_t T : {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{5}}) {
        const Both xs = upload_both(random_tensor(dt, {T, n, D}));
        const Both y = outputs(dt, {T, D}), y_normed = outputs(dt, {T, D}), fused = outputs(dt, {T, D});
        const Both post = outputs(DType::kF32, {T, n}), comb = outputs(DType::kF32, {T, n, n});
        const Both fused_post = outputs(DType::kF32, {T, n}), fused_comb = outputs(DType::kF32, {T, n, n});
        gpu_->hc_pre({xs.gpu.view(), &w.fn.gpu, &w.scale.gpu, &w.base.gpu, 20, 1e-6f, 1e-6f, y.gpu.view(),
                      post.gpu.view(), comb.gpu.view()});
        gpu_->rms_norm({y.gpu.view(), &norm.gpu, 1e-6f, y_normed.gpu.view()});
        gpu_->hc_pre({xs.gpu.view(), &w.fn.gpu, &w.scale.gpu, &w.base.gpu, 20, 1e-6f, 1e-6f, fused.gpu.view(),
                      fused_post.gpu.view(), fused_comb.gpu.view(), &norm.gpu});
        for (const auto& [name, want, got] : {std::tuple{"y", &y_normed, &fused}, std::tuple{"post", &post, &fused_post},
                                              std::tuple{"comb", &comb, &fused_comb}}) {
          const Tensor a = from_gpu(want->gpu), b = from_gpu(got->gpu);
          ASSERT_EQ(std::memcmp(a.data<std::byte>(), b.data<std::byte>(), a.nbytes()), 0)
              << name << " differs: D " << D << ", " << T << " tokens, " << dtype_name(dt);
        }
      }
    }
  }
}

// D a multiple of 8 at 256 tokens or more takes the kernel's 8-column accesses, of 4 its 4-column
// ones, D = 702 its one-column ones.
TEST_F(CudaOpsMhc, HcPostIsBitExact) {
  for (const auto& [T, dt, D] : {std::tuple{int64_t{5}, DType::kF32, int64_t{704}},
                                 std::tuple{int64_t{260}, DType::kF32, int64_t{704}},
                                 std::tuple{int64_t{300}, DType::kBF16, int64_t{704}},
                                 std::tuple{int64_t{5}, DType::kF32, int64_t{700}},
                                 std::tuple{int64_t{5}, DType::kBF16, int64_t{700}},
                                 std::tuple{int64_t{300}, DType::kBF16, int64_t{700}},
                                 std::tuple{int64_t{7}, DType::kF32, int64_t{702}},
                                 std::tuple{int64_t{7}, DType::kBF16, int64_t{702}}}) {
    const int64_t n = 4;
    const Both a = upload_both(random_tensor(dt, {T, D}));
    const Both x = upload_both(random_tensor(dt, {T, n, D}));
    const Both post = upload_both(random_tensor(DType::kF32, {T, n}));
    const Both comb = upload_both(random_tensor(DType::kF32, {T, n, n}, 0.3f));
    const Both out = outputs(dt, {T, n, D});
    cpu_.hc_post({a.cpu.view(), x.cpu.view(), post.cpu.view(), comb.cpu.view(), out.cpu.view()});
    gpu_->hc_post({a.gpu.view(), x.gpu.view(), post.gpu.view(), comb.gpu.view(), out.gpu.view()});
    expect_same_bits("hc_post " + dtype_tag(dt), from_cpu(out.cpu), from_gpu(out.gpu));
  }
}

TEST_F(CudaOpsMhc, HcHeadMatchesInBothModes) {
  const int64_t T = 6, n = 4, D = 512;
  const HcWeightsBoth w = hc_weights(n, n * D, 1);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor x = random_tensor(dt, {T, n, D});
    const Both xs = upload_both(x);
    const Both y = outputs(dt, {T, D});
    cpu_.hc_head({xs.cpu.view(), &w.fn.cpu, &w.scale.cpu, &w.base.cpu, 1e-6f, 1e-6f, y.cpu.view()});
    gpu_->hc_head({xs.gpu.view(), &w.fn.gpu, &w.scale.gpu, &w.base.gpu, 1e-6f, 1e-6f, y.gpu.view()});
    const std::vector<float> want = floats_of(from_cpu(y.cpu));
    expect_within("hc_head y " + dtype_tag(dt), want, floats_of(from_gpu(y.gpu)),
                  stream_sum_tolerance(x, want, n, D, dt));
  }
}

}  // namespace
}  // namespace dsv4
