// Helpers for the CPU backend's unit tests: tensors and weights from plain vectors, bitwise
// comparison that names the first differing element.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/numeric.h"
#include "kv/packed_entries.h"

namespace dsv4::testing {

inline DeviceTensor make_tensor(Ops& ops, DType dtype, Shape shape, const std::vector<float>& values) {
  DeviceTensor t = ops.alloc(dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) t.view().data<float>()[i] = values[i];
    else t.view().data<uint16_t>()[i] = float_to_bf16(values[i]);
  }
  return t;
}

inline DeviceTensor make_ints(Ops& ops, Shape shape, const std::vector<int32_t>& values) {
  DeviceTensor t = ops.alloc(DType::kI32, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  std::memcpy(t.view().bytes(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

// A [rows, width] tensor as a paged cache of one page with the table [0] (the contiguous
// layout); the table lives as long as the returned value.
struct OnePageCache {
  DeviceTensor table;
  PagedCache cache;
};
inline OnePageCache one_page_cache(Ops& ops, const DeviceTensor& rows) {
  DeviceTensor table = make_ints(ops, {1}, {0});
  const PagedCache cache{rows.reshaped({1, rows.dim(0), rows.dim(1)}).view(), table.view()};
  return {std::move(table), cache};
}

inline std::vector<float> to_floats(ConstTensorView v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = v.dtype() == DType::kF32 ? v.data<float>()[i] : bf16_to_float(v.data<uint16_t>()[i]);
  return out;
}

// A cache tensor's rows ([pages, page_rows, width] pools, [W, width] window rings) as floats:
// float rows as they are, packed entries (kv/packed_entries.h, pages of dim(rank - 2) entries)
// decoded, row after row.
inline std::vector<float> cache_floats(ConstTensorView v) {
  const int64_t stored = v.dim(v.rank() - 1), page_rows = v.dim(v.rank() - 2);
  if (packed_entry(v.dtype(), stored) == PackedEntry::kNone) return to_floats(v);
  const int64_t rows = v.numel() / stored, width = unpacked_width(v.dtype(), stored);
  const auto* bytes = reinterpret_cast<const uint8_t*>(v.bytes());
  std::vector<float> out(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    if (width == Fp8CacheLayout::kHeadDim)
      decode_fp8_entry(bytes, Fp8CacheLayout{static_cast<int>(page_rows)}, r, out.data() + r * width);
    else
      decode_mxfp4_key(bytes, Mxfp4KeyLayout{static_cast<int>(page_rows)}, r, out.data() + r * width);
  }
  return out;
}

inline std::vector<int32_t> to_ints(ConstTensorView v) {
  return {v.data<int32_t>(), v.data<int32_t>() + v.numel()};
}

// A plain fp32 weight, loaded the way the model loads one.
inline Weight make_weight(Ops& ops, const std::vector<float>& values, Shape shape, const std::string& name = "w") {
  const ConstTensorView v = host_view(values.data(), DType::kF32, std::move(shape));
  return ops.load_weight({name, WeightFormat::kPlain, v, {}});
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Bitwise equality of two float sequences; the failure names the first differing index.
inline ::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (float_bits(a[i]) != float_bits(b[i]))
      return ::testing::AssertionFailure() << "first difference at index " << i << ": " << a[i] << " vs " << b[i]
                                           << " (bits " << float_bits(a[i]) << " vs " << float_bits(b[i])
                                           << ")";
  return ::testing::AssertionSuccess();
}

// max |a - b| / max(max |b|, tiny): a relative error over the whole vector.
inline double max_rel_error(const std::vector<float>& a, const std::vector<double>& ref) {
  double worst = 0, scale = 1e-30;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - ref[i]));
  return worst / scale;
}

}  // namespace dsv4::testing
