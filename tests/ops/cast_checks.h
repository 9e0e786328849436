// A device-wide check of kernels::float2_to_e4m3x2 against core/numeric.h's float_to_e4m3 (the
// CPU's rounding) over every 32-bit float pattern.
#pragma once

#include <cstdint>

namespace dsv4::testing {

// Every pattern u goes through float2_to_e4m3x2 as lo (paired with ~u as hi) and as hi (paired
// with u ^ 0x80000000 as lo), so both byte positions see every float. Adds the patterns whose codes
// differ to *mismatches and writes one of them to *first_bad (both device memory, zeroed by the
// caller).
void launch_e4m3_cast_check(unsigned long long* mismatches, uint32_t* first_bad);

}  // namespace dsv4::testing
