// Timing GPU work for the kernel benchmarks: the mean of many runs by CUDA events, after warm-up;
// and their inputs copied to the device.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/cuda_check.h"

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

// A device copy of `host` (at least one element's memory, so an empty vector gets a valid pointer);
// the benchmark frees it.
template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* p = nullptr;
  DSV4_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(1, host.size()) * sizeof(T)));
  DSV4_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

}  // namespace dsv4::bench
