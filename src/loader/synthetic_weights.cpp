// Deterministic random checkpoint tensors: the counter-based generator, the per-tensor recipes
// documented in synthetic_weights.h, and the quantisation into the released formats.
#include "loader/synthetic_weights.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <exception>
#include <functional>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "core/counter_bits.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/quant.h"

namespace dsv4 {

namespace {

// Horner evaluation of c[0] + c[1] y + c[2] y^2 + ..., unrolled into straight-line code.
template <size_t N>
double horner(const std::array<double, N>& c, double y) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    double r = c[N - 1];
    ((r = r * y + c[N - 2 - I]), ...);
    return r;
  }(std::make_index_sequence<N - 1>{});
}

// Series coefficients, computed at compile time (exactly rounded there, so the same everywhere).
constexpr std::array<double, 7> kAtanhCoeffs = [] {  // atanh(s)/s = sum s^2k / (2k + 1)
  std::array<double, 7> c{};
  for (size_t k = 0; k < c.size(); ++k) c[k] = 1.0 / (2.0 * static_cast<double>(k) + 1.0);
  return c;
}();
constexpr std::array<double, 9> kCosCoeffs = [] {  // cos x = sum (-1)^k x^2k / (2k)!
  std::array<double, 9> c{};
  double term = 1.0;
  for (size_t k = 0; k < c.size(); ++k) {
    c[k] = term;
    term = -term / ((2.0 * static_cast<double>(k) + 1.0) * (2.0 * static_cast<double>(k) + 2.0));
  }
  return c;
}();
constexpr std::array<double, 9> kSinCoeffs = [] {  // sin x / x = sum (-1)^k x^2k / (2k+1)!
  std::array<double, 9> c{};
  double term = 1.0;
  for (size_t k = 0; k < c.size(); ++k) {
    c[k] = term;
    term = -term / ((2.0 * static_cast<double>(k) + 2.0) * (2.0 * static_cast<double>(k) + 3.0));
  }
  return c;
}();

// ln(x) for a positive normal double with + - * / only: x = m * 2^e split off the bits (exact),
// m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172; seven
// terms of the atanh series leave a relative error below 1e-11.
inline double portable_log(double x) {
  uint64_t b = std::bit_cast<uint64_t>(x);
  int64_t e = static_cast<int64_t>((b >> 52) & 0x7ff) - 1023;
  b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
  double m = std::bit_cast<double>(b);
  if (m > 1.41421356237309504880) {
    m *= 0.5;
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  return static_cast<double>(e) * 0.69314718055994530942 + 2.0 * s * horner(kAtanhCoeffs, s * s);
}

// cos and sin of 2 pi u for u in [0, 1): the quadrant q = floor(4u) is split off exactly, the rest
// x = (4u - q) pi/2 in [0, pi/2) goes through nine Taylor terms each (error < 1e-12).
inline void portable_cos_sin_2pi(double u, double& c, double& s) {
  const double t = 4.0 * u;
  const double q = std::floor(t);
  const double x = (t - q) * 1.57079632679489661923;
  const double x2 = x * x;
  const double cx = horner(kCosCoeffs, x2);
  const double sx = x * horner(kSinCoeffs, x2);
  const int quadrant = static_cast<int>(q);
  // Rotating by quadrant * 90 degrees: (c, s) = (cx, sx), (-sx, cx), (-cx, -sx), (sx, -cx).
  const bool swap = quadrant & 1;
  c = swap ? sx : cx;
  s = swap ? cx : sx;
  if (quadrant == 1 || quadrant == 2) c = -c;
  if (quadrant >= 2) s = -s;
}

constexpr int64_t kFp8Block = 128;
constexpr int64_t kFp4Block = 32;

// Fills out with a + b * z, z ~ N(0, 1) taken from stream indices first, first + 1, ...
void fill_affine(const CounterRng& rng, uint64_t first, std::span<float> out, float a, float b) {
  rng.fill_normal(first, out);
  for (float& v : out) v = a + b * v;
}

// Runs body(begin, end) over contiguous pieces of [0, n), at least `min_piece` long, on up to
// one thread per core. The values never depend on the split: each comes from its own counter.
void parallel_ranges(int64_t n, int64_t min_piece, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t pieces = std::clamp<int64_t>(n / std::max<int64_t>(min_piece, 1), 1, cores);
  if (pieces == 1) {
    body(0, n);
    return;
  }
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(pieces));
  for (int64_t i = 0; i < pieces; ++i)
    threads.emplace_back([&, i] {
      try {
        body(n * i / pieces, n * (i + 1) / pieces);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

constexpr int64_t kParallelElements = 1 << 18;  // the smallest piece of work worth a thread

// A bf16 tensor of a + b * z, generated in pieces to keep the float buffers small.
Tensor bf16_tensor(const CounterRng& rng, const Shape& shape, float a, float b) {
  Tensor t(DType::kBF16, shape);
  uint16_t* dst = t.data<uint16_t>();
  parallel_ranges(t.numel(), kParallelElements, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(static_cast<size_t>(std::min<int64_t>(end - begin, 1 << 16)));
    for (int64_t i = begin; i < end; i += static_cast<int64_t>(buf.size())) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(buf.size()), end - i));
      fill_affine(rng, static_cast<uint64_t>(i), std::span<float>(buf.data(), n), a, b);
      for (size_t j = 0; j < n; ++j) dst[static_cast<size_t>(i) + j] = float_to_bf16(buf[j]);
    }
  });
  return t;
}

Tensor f32_tensor(const CounterRng& rng, const Shape& shape, float a, float b) {
  Tensor t(DType::kF32, shape);
  fill_affine(rng, 0, t.span<float>(), a, b);
  return t;
}

// N(0, 1/in) weights [out, in] quantised to e4m3 with one pow2 e8m0 scale per 128x128 tile,
// generated one 128-row stripe at a time.
SyntheticTensor fp8_linear(const CounterRng& rng, const Shape& shape, float std_dev) {
  const int64_t rows = shape.at(0);
  const int64_t cols = shape.at(1);
  const int64_t block_rows = (rows + kFp8Block - 1) / kFp8Block;
  const int64_t block_cols = (cols + kFp8Block - 1) / kFp8Block;
  SyntheticTensor out{Tensor(DType::kF8E4M3, shape), Tensor(DType::kF8E8M0, {block_rows, block_cols})};
  uint8_t* codes = out.data.data<uint8_t>();
  uint8_t* scales = out.scale->data<uint8_t>();
  const int64_t stripes_per_piece = kParallelElements / (kFp8Block * cols) + 1;
  parallel_ranges(block_rows, stripes_per_piece, [&](int64_t first_stripe, int64_t end_stripe) {
    std::vector<float> stripe(static_cast<size_t>(std::min(rows, kFp8Block) * cols));
    for (int64_t br = first_stripe; br < end_stripe; ++br) {
      const int64_t r0 = br * kFp8Block;
      const int64_t nr = std::min(kFp8Block, rows - r0);
      const std::span<float> x(stripe.data(), static_cast<size_t>(nr * cols));
      fill_affine(rng, static_cast<uint64_t>(r0 * cols), x, 0.0f, std_dev);
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        const int64_t c0 = bc * kFp8Block;
        const int64_t c1 = std::min(cols, c0 + kFp8Block);
        float amax = 0.0f;
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
        const int e = pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
        scales[br * block_cols + bc] = e8m0_from_exponent(e);
        const float inv_scale = std::ldexp(1.0f, -e);  // exact: x * 2^-e rounds like ldexp(x, -e)
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t c = c0; c < c1; ++c)
            codes[(r0 + r) * cols + c] = float_to_e4m3(x[static_cast<size_t>(r * cols + c)] * inv_scale);
      }
    }
  });
  return out;
}

// N(0, 1/in) weights [out, in] quantised to e2m1 pairs (I8 [out, in/2], even input in the low
// nibble) with one pow2 e8m0 scale per 32 inputs, one row at a time.
SyntheticTensor mxfp4_linear(const CounterRng& rng, const Shape& packed_shape, float std_dev) {
  const int64_t rows = packed_shape.at(0);
  const int64_t cols = 2 * packed_shape.at(1);
  const int64_t groups = cols / kFp4Block;
  SyntheticTensor out{Tensor(DType::kI8, packed_shape), Tensor(DType::kF8E8M0, {rows, groups})};
  uint8_t* packed = out.data.data<uint8_t>();
  uint8_t* scales = out.scale->data<uint8_t>();
  parallel_ranges(rows, kParallelElements / cols + 1, [&](int64_t first_row, int64_t end_row) {
    std::vector<float> row(static_cast<size_t>(cols));
    uint8_t codes[kFp4Block];
    for (int64_t r = first_row; r < end_row; ++r) {
      fill_affine(rng, static_cast<uint64_t>(r * cols), row, 0.0f, std_dev);
      for (int64_t g = 0; g < groups; ++g) {
        scales[r * groups + g] = quantize_block_e2m1(row.data() + g * kFp4Block, static_cast<int>(kFp4Block), codes);
        for (int64_t j = 0; j < kFp4Block; j += 2)
          packed[(r * cols + g * kFp4Block + j) / 2] = pack_e2m1x2(codes[j], codes[j + 1]);
      }
    }
  });
  return out;
}

// k distinct experts out of n_experts per token id: a partial Fisher-Yates shuffle per row whose
// j-th swap uses bits(row * k + j).
Tensor tid2eid_table(const CounterRng& rng, const Shape& shape, int64_t n_experts) {
  const int64_t rows = shape.at(0);
  const int64_t k = shape.at(1);
  Tensor t(DType::kI64, shape);
  int64_t* ids = t.data<int64_t>();
  parallel_ranges(rows, kParallelElements / n_experts + 1, [&](int64_t first_row, int64_t end_row) {
    std::vector<int64_t> perm(static_cast<size_t>(n_experts));
    for (int64_t r = first_row; r < end_row; ++r) {
      std::iota(perm.begin(), perm.end(), int64_t{0});
      for (int64_t j = 0; j < k; ++j) {
        const uint64_t left = static_cast<uint64_t>(n_experts - j);
        const int64_t pick = j + static_cast<int64_t>(rng.bits(static_cast<uint64_t>(r * k + j)) % left);
        std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(pick)]);
        ids[r * k + j] = perm[static_cast<size_t>(j)];
      }
    }
  });
  return t;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The last dot-separated component of a name ("layers.3.hc_attn_fn" -> "hc_attn_fn").
std::string_view leaf(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// hc_{attn,ffn}_base [(2+n)*n] or hc_head_base [n], as synthetic_weights.h describes.
Tensor hc_base(const CounterRng& rng, const Shape& shape, int64_t n) {
  Tensor t = f32_tensor(rng, shape, 0.0f, 0.1f);
  std::span<float> v = t.span<float>();
  const float pre = n > 1 ? static_cast<float>(-portable_log(static_cast<double>(n - 1))) : 0.0f;
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(j)] += pre;
  if (static_cast<int64_t>(v.size()) == (2 + n) * n)
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(2 * n + i * n + i)] += 1.0f;
  return t;
}

}  // namespace

CounterRng::CounterRng(uint64_t seed, std::string_view name) : key_(counter_key(seed, name)) {}

uint64_t CounterRng::bits(uint64_t counter) const { return counter_bits(key_, counter); }

double CounterRng::uniform(uint64_t counter) const {
  return (static_cast<double>(bits(counter) >> 11) + 0.5) * 0x1.0p-53;
}

void CounterRng::fill_normal(uint64_t first, std::span<float> out) const {
  // Pairs are made in batches, one simple loop per step, so the CPU overlaps their latencies.
  constexpr uint64_t kBatch = 256;
  std::array<double, kBatch> radius;
  std::array<double, kBatch> cos_part;
  std::array<double, kBatch> sin_part;
  const uint64_t end = first + out.size();
  for (uint64_t p0 = first / 2; 2 * p0 < end; p0 += kBatch) {
    const uint64_t np = std::min(kBatch, (end + 1) / 2 - p0);
    for (uint64_t i = 0; i < np; ++i) radius[i] = std::sqrt(-2.0 * portable_log(uniform(2 * (p0 + i))));
    for (uint64_t i = 0; i < np; ++i) portable_cos_sin_2pi(uniform(2 * (p0 + i) + 1), cos_part[i], sin_part[i]);
    for (uint64_t i = 0; i < np; ++i) {
      const uint64_t even = 2 * (p0 + i);
      if (even >= first) out[even - first] = static_cast<float>(radius[i] * cos_part[i]);
      if (even + 1 < end) out[even + 1 - first] = static_cast<float>(radius[i] * sin_part[i]);
    }
  }
}

std::optional<float> linear_weight_std(const ExpectedTensor& entry) {
  const TensorSpec& spec = entry.spec;
  if (spec.shape.size() != 2) return std::nullopt;
  const auto in_std = [](int64_t in) { return 1.0f / std::sqrt(static_cast<float>(in)); };
  if (entry.format == WeightFormat::kFp8) return in_std(spec.shape[1]);
  if (entry.format == WeightFormat::kMxfp4) return in_std(2 * spec.shape[1]);  // two inputs a byte
  if (spec.dtype != DType::kBF16) return std::nullopt;
  if (spec.name == "embed.weight") return 1.0f;
  if (leaf(spec.name) == "weight") return in_std(spec.shape[1]);
  return std::nullopt;
}

SyntheticTensor synthesize_tensor(const ModelConfig& cfg, const ExpectedTensor& entry, uint64_t seed) {
  const TensorSpec& spec = entry.spec;
  const CounterRng rng(seed, spec.name);
  const std::string_view name = spec.name;
  const std::string_view last = leaf(name);
  const int64_t n = cfg->hc_mult;
  const bool rank2 = spec.shape.size() == 2;

  const std::optional<float> linear_std = linear_weight_std(entry);
  if (entry.format == WeightFormat::kFp8) return fp8_linear(rng, spec.shape, linear_std.value());
  if (entry.format == WeightFormat::kMxfp4) return mxfp4_linear(rng, spec.shape, linear_std.value());
  if (spec.dtype == DType::kF8E8M0)
    throw UsageError(spec.name + ": a scale is synthesised together with its weight, not alone");
  if (spec.dtype == DType::kI64 && last == "tid2eid")
    return {tid2eid_table(rng, spec.shape, cfg->n_routed_experts), std::nullopt};
  if (spec.dtype == DType::kBF16) {
    if (linear_std) return {bf16_tensor(rng, spec.shape, 0.0f, *linear_std), std::nullopt};
    if (ends_with(name, "norm.weight")) return {bf16_tensor(rng, spec.shape, 1.0f, 0.05f), std::nullopt};
  }
  if (spec.dtype == DType::kF32) {
    if (rank2 && last.starts_with("hc_") && ends_with(last, "_fn")) {
      const float std_dev = 1.0f / std::sqrt(static_cast<float>(spec.shape[1]));
      return {f32_tensor(rng, spec.shape, 0.0f, std_dev), std::nullopt};
    }
    if (last.starts_with("hc_") && ends_with(last, "_base")) return {hc_base(rng, spec.shape, n), std::nullopt};
    if (last.starts_with("hc_") && ends_with(last, "_scale")) return {f32_tensor(rng, spec.shape, 0.5f, 0.05f), std::nullopt};
    if (last == "attn_sink") return {f32_tensor(rng, spec.shape, 0.0f, 0.5f), std::nullopt};
    if (last == "ape") return {f32_tensor(rng, spec.shape, 0.0f, 0.1f), std::nullopt};
    if (ends_with(name, "gate.bias")) return {f32_tensor(rng, spec.shape, 0.0f, 0.02f), std::nullopt};
  }
  throw UsageError(spec.name + ": no synthetic recipe for a " + std::string(dtype_name(spec.dtype)) +
                   " tensor of shape " + shape_str(spec.shape));
}

}  // namespace dsv4
