// Device-wide checks of the kernels' hardware pair conversions against core/numeric.h's roundings
// (the CPU's) over every 32-bit float pattern: kernels::float2_to_e4m3x2 against float_to_e4m3 and
// kernels::float2_to_bf16x2 against float_to_bf16.
#pragma once

#include <cstdint>

namespace dsv4::testing {

// How many float patterns a pair conversion rounds otherwise than the CPU, and one of them.
struct CastMismatches {
  unsigned long long count = 0;
  uint32_t first_bad = 0;
};

// Every pattern u goes through the pair conversion as lo (paired with ~u as hi) and as hi (paired
// with u ^ 0x80000000 as lo), so both positions see every float; the call waits for the device.
CastMismatches e4m3_cast_mismatches();
CastMismatches bf16_cast_mismatches();

}  // namespace dsv4::testing
