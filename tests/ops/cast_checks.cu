// launch_e4m3_cast_check (e4m3_cast_check.h): a grid-strided walk over the 2^32 patterns.
#include "tests/ops/e4m3_cast_check.h"

#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/e4m3_cast.cuh"

namespace dsv4::testing {
namespace {

__global__ void e4m3_cast_check_kernel(unsigned long long* mismatches, uint32_t* first_bad) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const auto u = static_cast<uint32_t>(i);
    const float f = __uint_as_float(u), g = __uint_as_float(~u), h = __uint_as_float(u ^ 0x80000000u);
    const uint32_t as_lo = kernels::float2_to_e4m3x2(f, g), as_hi = kernels::float2_to_e4m3x2(h, f);
    const uint32_t want_lo = float_to_e4m3(f) | static_cast<uint32_t>(float_to_e4m3(g)) << 8;
    const uint32_t want_hi = float_to_e4m3(h) | static_cast<uint32_t>(float_to_e4m3(f)) << 8;
    if (as_lo != want_lo || as_hi != want_hi) {
      ++bad;
      atomicExch(first_bad, u);
    }
  }
  if (bad != 0) atomicAdd(mismatches, bad);
}

}  // namespace

void launch_e4m3_cast_check(unsigned long long* mismatches, uint32_t* first_bad) {
  e4m3_cast_check_kernel<<<1024, 256>>>(mismatches, first_bad);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::testing
