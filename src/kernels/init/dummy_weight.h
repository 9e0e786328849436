// Launchers that fill dummy weights (`--load-format dummy`) in device memory with the values of
// core/dummy_random.h, so full-size random models need no checkpoint and no host copy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

// out[i] = mean + std * dummy_normal(key, i), rounded to out's type, for i < n.
struct DummyFloatsParams {
  MutFloatPtr out;
  int64_t n = 0;
  uint64_t key = 0;
  float mean = 0;
  float std = 1;
};
void dummy_floats(const DummyFloatsParams& p, cudaStream_t stream);

// codes[i] = dummy_e4m3_code(key, i, mean, std, inv_scale) for i < n.
struct DummyE4m3Params {
  uint8_t* codes = nullptr;
  int64_t n = 0;
  uint64_t key = 0;
  float mean = 0;
  float std = 1;
  float inv_scale = 1;  // 2^-e, e = dummy_fp8_scale_exponent(mean, std)
};
void dummy_e4m3(const DummyE4m3Params& p, cudaStream_t stream);

}  // namespace dsv4::kernels
