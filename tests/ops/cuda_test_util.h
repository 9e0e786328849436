// Helpers shared by the GPU op tests: a device buffer that frees itself and can be poisoned,
// and the skip for machines without a GPU.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/device.h"
#include "kernels/cuda_check.h"

namespace dsv4::testing {

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { DSV4_CUDA_CHECK(cudaMalloc(&p_, (n ? n : 1) * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& v) {
    DSV4_CUDA_CHECK(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    DSV4_CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  // Fill with a pattern no kernel writes on purpose, so unwritten outputs show up.
  void poison() { DSV4_CUDA_CHECK(cudaMemset(p_, 0xa5, n_ * sizeof(T))); }

 private:
  T* p_ = nullptr;
  size_t n_;
};

}  // namespace dsv4::testing

#define DSV4_SKIP_WITHOUT_GPU() \
  if (!::dsv4::cuda::device_available()) GTEST_SKIP() << "no CUDA device on this machine"
