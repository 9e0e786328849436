// The current CUDA device's SM count, which launches size their grids by (host code: kernels'
// launchers, the CUDA backend, benchmarks).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda_check.h"

namespace dsv4::kernels {

// The current device's SMs.
inline int current_device_sm_count() {
  int device = 0, sms = 0;
  DSV4_CUDA_CHECK(cudaGetDevice(&device));
  DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace dsv4::kernels
