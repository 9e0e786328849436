// Helpers shared by the GPU op tests: a device buffer that frees itself and can be poisoned, a
// GEMM test's shape with its printed and test names, and the skip for machines without a GPU.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
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

// A GEMM test's shape: m rows of x, n outputs, k inputs.
struct GemmShape {
  int64_t m, n, k;
};

inline void PrintTo(const GemmShape& s, std::ostream* os) { *os << "m=" << s.m << " n=" << s.n << " k=" << s.k; }

// "m<m>_n<n>_k<k>", the shape as a parameterised test's name.
inline std::string gemm_shape_name(const ::testing::TestParamInfo<GemmShape>& info) {
  return "m" + std::to_string(info.param.m) + "_n" + std::to_string(info.param.n) + "_k" + std::to_string(info.param.k);
}

}  // namespace dsv4::testing

#define DSV4_SKIP_WITHOUT_GPU() \
  if (!::dsv4::cuda::device_available()) GTEST_SKIP() << "no CUDA device on this machine"
