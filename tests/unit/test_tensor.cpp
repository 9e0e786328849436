// Tensor views and owning buffers: sizes, alignment, typed access, const conversion.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dsv4 {
namespace {

TEST(Tensor, SizesAlignmentAndZeroInit) {
  Tensor t(DType::kBF16, {3, 5});
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 30u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<uint16_t>()) % 64, 0u);
  for (uint16_t v : t.span<uint16_t>()) EXPECT_EQ(v, 0);
  TensorView v = t.view();
  v.data<uint16_t>()[7] = 0x3f80;
  ConstTensorView c = v;
  EXPECT_EQ(c.data<uint16_t>()[7], 0x3f80);
  EXPECT_EQ(c.dim(-1), 5);
  EXPECT_EQ(shape_str(c.shape()), "[3, 5]");
}

TEST(Tensor, RejectsNegativeDims) { EXPECT_THROW(Tensor(DType::kF32, {2, -1}), UsageError); }

TEST(DType, SafetensorsNamesRoundTrip) {
  for (DType t : {DType::kBF16, DType::kF32, DType::kF8E4M3, DType::kF8E8M0, DType::kI8, DType::kU8,
                  DType::kI32, DType::kI64}) {
    auto name = safetensors_name(t);
    ASSERT_TRUE(name.has_value());
    EXPECT_EQ(dtype_from_safetensors(*name), t);
  }
  EXPECT_FALSE(safetensors_name(DType::kE2M1x2).has_value());
  EXPECT_FALSE(dtype_from_safetensors("F4").has_value());
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
}

}  // namespace
}  // namespace dsv4
