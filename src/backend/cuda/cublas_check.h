// Error checking for cuBLASLt calls: DSV4_CUBLAS_CHECK throws a CudaError carrying the
// expression, file, line and the status name.
#pragma once

#include <cublasLt.h>

#include <string>

#include "core/error.h"

namespace dsv4::cuda {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                  cublasLtGetStatusName(st) + " (" + cublasLtGetStatusString(st) + ")");
}

}  // namespace dsv4::cuda

#define DSV4_CUBLAS_CHECK(expr)                                                     \
  do {                                                                              \
    const cublasStatus_t dsv4_cublas_st_ = (expr);                                  \
    if (dsv4_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::dsv4::cuda::throw_cublas_error(dsv4_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)
