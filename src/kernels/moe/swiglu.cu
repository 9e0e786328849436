// Elementwise, one thread per value, in CpuOps' operation order (silu as v / (1 + exp(-v)),
// then the product, then the row weight); only expf's last bit can differ from the CPU.
#include "kernels/moe/swiglu.h"

#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void swiglu_kernel(SwigluParams p) {
  pdl_wait();
  const int64_t x = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (x >= p.rows * p.cols) return;
  float gate = load_float(p.gate, x), up = load_float(p.up, x);
  if (p.limit > 0) {
    gate = fminf(gate, p.limit);
    up = fminf(fmaxf(up, -p.limit), p.limit);
  }
  float h = __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate))), up);
  if (p.row_weight != nullptr) h = __fmul_rn(p.row_weight[x / p.cols], h);
  store_float(p.out, x, h);
}

}  // namespace

void swiglu(const SwigluParams& p, cudaStream_t stream) {
  const int64_t n = p.rows * p.cols;
  if (n <= 0) return;
  launch_pdl(swiglu_kernel, static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
