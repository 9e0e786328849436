// e4m3_cast_mismatches and bf16_cast_mismatches (cast_checks.h): grid-strided walks over the 2^32
// patterns.
#include "tests/ops/cast_checks.h"

#include "core/numeric.h"
#include "kernels/bf16_cast.cuh"
#include "kernels/cuda_check.h"
#include "kernels/e4m3_cast.cuh"
#include "tests/ops/cuda_test_util.h"

namespace dsv4::testing {
namespace {

// want(lo, hi) is the CPU's pair of codes, lo's in the low bits, and got(lo, hi) the kernels'.
template <class Got, class Want>
__device__ void cast_check(unsigned long long* mismatches, uint32_t* first_bad, Got got, Want want) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const auto u = static_cast<uint32_t>(i);
    const float f = __uint_as_float(u), g = __uint_as_float(~u), h = __uint_as_float(u ^ 0x80000000u);
    if (got(f, g) != want(f, g) || got(h, f) != want(h, f)) {
      ++bad;
      atomicExch(first_bad, u);
    }
  }
  if (bad != 0) atomicAdd(mismatches, bad);
}

__global__ void e4m3_cast_check_kernel(unsigned long long* mismatches, uint32_t* first_bad) {
  cast_check(mismatches, first_bad, [](float lo, float hi) { return kernels::float2_to_e4m3x2(lo, hi); },
             [](float lo, float hi) { return float_to_e4m3(lo) | static_cast<uint32_t>(float_to_e4m3(hi)) << 8; });
}

__global__ void bf16_cast_check_kernel(unsigned long long* mismatches, uint32_t* first_bad) {
  cast_check(mismatches, first_bad, [](float lo, float hi) { return kernels::float2_to_bf16x2(lo, hi); },
             [](float lo, float hi) { return float_to_bf16(lo) | static_cast<uint32_t>(float_to_bf16(hi)) << 16; });
}

// Runs `kernel` over every pattern and reads back what it found.
CastMismatches run_check(void (*kernel)(unsigned long long*, uint32_t*)) {
  DeviceBuffer<unsigned long long> mismatches(1);
  DeviceBuffer<uint32_t> first_bad(1);
  mismatches.upload({0});
  first_bad.upload({0});
  kernel<<<1024, 256>>>(mismatches.get(), first_bad.get());
  DSV4_CUDA_CHECK(cudaGetLastError());
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  return {mismatches.download()[0], first_bad.download()[0]};
}

}  // namespace

CastMismatches e4m3_cast_mismatches() { return run_check(e4m3_cast_check_kernel); }

CastMismatches bf16_cast_mismatches() { return run_check(bf16_cast_check_kernel); }

}  // namespace dsv4::testing
