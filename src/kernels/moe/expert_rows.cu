// Row gathers copy 16-bit words (every activation dtype is a multiple of that); the combine runs
// one thread per (token, column) with the CPU's summation order.
#include "kernels/moe/expert_rows.h"

#include "backend/cuda/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void gather_rows_kernel(GatherRowsParams p) {
  pdl_wait();
  const int64_t words = p.row_bytes / 2;
  const int64_t x = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (x >= p.rows * words) return;
  const int64_t r = x / words, w = x % words;
  static_cast<uint16_t*>(p.dst)[x] = static_cast<const uint16_t*>(p.src)[p.index[r] * words + w];
}

__global__ void combine_experts_kernel(CombineExpertsParams p) {
  pdl_wait();
  const int64_t x = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (x >= p.tokens * p.dim) return;
  const int64_t t = x / p.dim, c = x % p.dim;
  float acc = 0.0f;
  for (int64_t s = 0; s < p.k; ++s) {
    const int32_t row = p.row_of[t * p.k + s];
    if (row >= 0) acc = __fadd_rn(acc, load_float(p.expert_out, row * p.dim + c));
  }
  store_float(p.out, x, __fadd_rn(acc, load_float(p.shared, x)));
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  const int64_t n = p.rows * (p.row_bytes / 2);
  if (n <= 0) return;
  launch_pdl(gather_rows_kernel, blocks_for(n), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void combine_experts(const CombineExpertsParams& p, cudaStream_t stream) {
  const int64_t n = p.tokens * p.dim;
  if (n <= 0) return;
  launch_pdl(combine_experts_kernel, blocks_for(n), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
