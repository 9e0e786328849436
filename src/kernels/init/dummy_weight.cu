// Grid-stride kernels for dummy weights; each element depends only on (key, index).
#include "kernels/init/dummy_weight.h"

#include <algorithm>

#include "core/dummy_random.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536));
}

__global__ void dummy_floats_kernel(DummyFloatsParams p) {
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_float(p.out, i, p.mean + p.std * dummy_normal(p.key, static_cast<uint64_t>(i)));
}

__global__ void dummy_e4m3_kernel(DummyE4m3Params p) {
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p.codes[i] = dummy_e4m3_code(p.key, static_cast<uint64_t>(i), p.mean, p.std, p.inv_scale);
}

}  // namespace

void dummy_floats(const DummyFloatsParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  launch_pdl(dummy_floats_kernel, grid_for(p.n), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void dummy_e4m3(const DummyE4m3Params& p, cudaStream_t stream) {
  if (p.n == 0) return;
  launch_pdl(dummy_e4m3_kernel, grid_for(p.n), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
