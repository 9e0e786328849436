// Format-conversion kernels. The scalar math comes from core/numeric.h, shared with the CPU
// reference, so both round identically.
#include "kernels/convert.h"

#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void dequant_fp8_block_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ scale,
                                         uint16_t* __restrict__ out, int64_t rows, int64_t cols) {
  pdl_wait();
  const int64_t scale_cols = (cols + 127) / 128;
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols, c = idx % cols;
    const float s = e8m0_to_float(scale[(r / 128) * scale_cols + c / 128]);
    out[idx] = float_to_bf16(e4m3_to_float(w[idx]) * s);
  }
}

__global__ void round_formats_kernel(const float* __restrict__ x, uint8_t* __restrict__ e4m3,
                                     uint8_t* __restrict__ e2m1, uint16_t* __restrict__ bf16, int64_t n) {
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    e4m3[i] = float_to_e4m3(x[i]);
    e2m1[i] = float_to_e2m1(x[i]);
    bf16[i] = float_to_bf16(x[i]);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

void dequant_fp8_block_to_bf16(const uint8_t* w, const uint8_t* scale, uint16_t* out, int64_t rows,
                               int64_t cols, cudaStream_t stream) {
  launch_pdl(dequant_fp8_block_kernel, grid_for(rows * cols), kThreads, 0, stream, w, scale, out, rows, cols);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void round_formats(const float* x, uint8_t* e4m3, uint8_t* e2m1, uint16_t* bf16, int64_t n,
                   cudaStream_t stream) {
  launch_pdl(round_formats_kernel, grid_for(n), kThreads, 0, stream, x, e4m3, e2m1, bf16, n);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
