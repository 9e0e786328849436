// Element types the engine stores and moves: the checkpoint's dtypes (bf16, fp32, fp8 e4m3,
// e8m0 scales, int8/int32/int64) plus packed e2m1 pairs, with their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
  kBF16,     // bfloat16
  kF32,      // IEEE float32
  kF8E4M3,   // float8 e4m3fn: no infinities, 0x7F/0xFF are NaN, max 448
  kF8E8M0,   // unsigned power-of-two scale, value 2^(b-127), 0xFF is NaN
  kE2M1x2,   // two fp4 e2m1 values per byte, even element in the low nibble
  kI8,
  kU8,
  kI32,
  kI64,
};

// Bytes per stored element (a kE2M1x2 element is one byte holding two values).
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBF16: return 2;
    case DType::kF32: return 4;
    case DType::kF8E4M3:
    case DType::kF8E8M0:
    case DType::kE2M1x2:
    case DType::kI8:
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

// Human-readable name, e.g. "bf16", "f8_e4m3".
std::string_view dtype_name(DType t);

// The safetensors header spelling ("BF16", "F8_E4M3", ...). kE2M1x2 is stored as "I8" in
// DeepSeek checkpoints, so it has no safetensors name of its own.
std::optional<std::string_view> safetensors_name(DType t);
std::optional<DType> dtype_from_safetensors(std::string_view name);

}  // namespace dsv4
