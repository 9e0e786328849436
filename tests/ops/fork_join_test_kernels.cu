// Kernels of fork_join_test_kernels.h: one thread each.
#include "fork_join_test_kernels.h"

#include "kernels/cuda_check.h"

namespace dsv4::testing {
namespace {

__global__ void slow_write_kernel(int* out, int value, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  *out = value;
}

__global__ void add_ints_kernel(const int* a, const int* b, int add, int* out) { *out = *a + (b ? *b : 0) + add; }

__global__ void set_flag_kernel(int* flag) { *static_cast<volatile int*>(flag) = 1; }

__global__ void wait_for_flag_kernel(const int* flag, int* saw, long long max_cycles) {
  const long long start = clock64();
  const volatile int* f = flag;
  int seen = 0;
  while (!(seen = *f) && clock64() - start < max_cycles) {
  }
  *saw = seen != 0;
}

}  // namespace

void slow_write(int* out, int value, int64_t cycles, cudaStream_t stream) {
  slow_write_kernel<<<1, 1, 0, stream>>>(out, value, cycles);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void add_ints(const int* a, const int* b, int add, int* out, cudaStream_t stream) {
  add_ints_kernel<<<1, 1, 0, stream>>>(a, b, add, out);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void set_flag(int* flag, cudaStream_t stream) {
  set_flag_kernel<<<1, 1, 0, stream>>>(flag);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void wait_for_flag(const int* flag, int* saw, int64_t max_cycles, cudaStream_t stream) {
  wait_for_flag_kernel<<<1, 1, 0, stream>>>(flag, saw, max_cycles);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::testing
