// Device-wide checks of the kernels' hardware pair conversions against core/numeric.h's roundings
// (the CPU's) over every 32-bit float pattern: kernels::float2_to_e4m3x2 against float_to_e4m3 and
// kernels::float2_to_bf16x2 against float_to_bf16.
#pragma once

#include <cstdint>

namespace dsv4::testing {

// Every pattern u goes through the pair conversion as lo (paired with ~u as hi) and as hi (paired
// with u ^ 0x80000000 as lo), so both positions see every float. Adds the patterns whose codes
// differ to *mismatches and writes one of them to *first_bad (both device memory, zeroed by the
// caller).
void launch_e4m3_cast_check(unsigned long long* mismatches, uint32_t* first_bad);
void launch_bf16_cast_check(unsigned long long* mismatches, uint32_t* first_bad);

}  // namespace dsv4::testing
