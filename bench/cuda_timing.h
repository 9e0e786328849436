// Timing GPU work for the kernel benchmarks: the mean of many runs by CUDA events, after warm-up.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "backend/cuda/cuda_check.h"

namespace dsv4::bench {

// Mean microseconds of `iters` runs of `step` (which enqueues on the legacy default stream) after
// three warm-up runs.
inline double time_us(const std::function<void()>& step, int iters) {
  cudaEvent_t start, stop;
  DSV4_CUDA_CHECK(cudaEventCreate(&start));
  DSV4_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) step();
  DSV4_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) step();
  DSV4_CUDA_CHECK(cudaEventRecord(stop));
  DSV4_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1e3 * ms / iters;
}

}  // namespace dsv4::bench
