// Error checking for CUDA runtime calls (kernels and the CUDA backend): every call goes through
// DSV4_CUDA_CHECK, which throws a CudaError carrying the expression, file, line and CUDA's error
// name. It lives with the kernels, below the backend, so kernels include no backend header.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace dsv4::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                  cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace dsv4::cuda

#define DSV4_CUDA_CHECK(expr)                                                    \
  do {                                                                           \
    const cudaError_t dsv4_cuda_err_ = (expr);                                   \
    if (dsv4_cuda_err_ != cudaSuccess)                                           \
      ::dsv4::cuda::throw_cuda_error(dsv4_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)
