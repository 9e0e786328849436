// Names of the element types, and their mapping to the safetensors header spelling.
#include "core/dtype.h"

#include <array>
#include <utility>

namespace dsv4 {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kF8E4M3: return "f8_e4m3";
    case DType::kF8E8M0: return "f8_e8m0";
    case DType::kE2M1x2: return "e2m1x2";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 8> kSafetensorsNames{{
    {DType::kBF16, "BF16"},
    {DType::kF32, "F32"},
    {DType::kF8E4M3, "F8_E4M3"},
    {DType::kF8E8M0, "F8_E8M0"},
    {DType::kI8, "I8"},
    {DType::kU8, "U8"},
    {DType::kI32, "I32"},
    {DType::kI64, "I64"},
}};
}  // namespace

std::optional<std::string_view> safetensors_name(DType t) {
  for (const auto& [dt, name] : kSafetensorsNames)
    if (dt == t) return name;
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& [dt, n] : kSafetensorsNames)
    if (n == name) return dt;
  return std::nullopt;
}

}  // namespace dsv4
