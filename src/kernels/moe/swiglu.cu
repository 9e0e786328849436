// Elementwise, one thread per value (eight bf16 values where every operand is bf16), in CpuOps'
// operation order (silu as v / (1 + exp(-v)), then the product, then the row weight); only expf's
// last bit can differ from the CPU.
#include "kernels/moe/swiglu.h"

#include <cstdint>

#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
#include "kernels/launch.cuh"
#include "kernels/moe/swiglu_value.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;
// Below this many values the eight-wide kernel's eight times fewer threads keep too few loads in
// flight: on the H200 a decode step's 196k-value swiglu took 98 us on one thread a value and 102
// on eight, the 786k-value one (batch 64) 237 and 153.
constexpr int64_t kEightWideMinValues = int64_t{1} << 18;

__global__ void swiglu_kernel(SwigluParams p) {
  pdl_wait();
  const int64_t x = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (x >= p.rows * p.cols) return;
  float h = swiglu_value(load_float(p.gate, x), load_float(p.up, x), p.limit);
  if (p.row_weight != nullptr) h = __fmul_rn(p.row_weight[x / p.cols], h);
  store_float(p.out, x, h);
}

// The same per value, eight bf16 values a thread (16-byte loads and stores), where gate, up and out
// are all bf16 and cols is a multiple of 8 (so a thread's values share a row).
__global__ void swiglu_bf16x8_kernel(SwigluParams p) {
  pdl_wait();
  const int64_t x0 = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) * 8;
  if (x0 >= p.rows * p.cols) return;
  const uint4 g = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.gate.data) + x0);
  const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.up.data) + x0);
  const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
  const float weight = p.row_weight != nullptr ? p.row_weight[x0 / p.cols] : 1.0f;
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint16_t h[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float v = swiglu_value(bf16_to_float(static_cast<uint16_t>(gw[i] >> (16 * half))),
                             bf16_to_float(static_cast<uint16_t>(uw[i] >> (16 * half))), p.limit);
      if (p.row_weight != nullptr) v = __fmul_rn(weight, v);
      h[half] = float_to_bf16(v);
    }
    out[i] = static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
  }
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out.data) + x0) = make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace

void swiglu(const SwigluParams& p, cudaStream_t stream) {
  const int64_t n = p.rows * p.cols;
  if (n <= 0) return;
  if (n >= kEightWideMinValues && p.gate.bf16 && p.up.bf16 && p.out.bf16 && p.cols % 8 == 0 && aligned16(p.gate.data) &&
      aligned16(p.up.data) && aligned16(p.out.data)) {
    launch_pdl(swiglu_bf16x8_kernel, static_cast<unsigned>((n / 8 + kThreads - 1) / kThreads), kThreads, 0, stream, p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  launch_pdl(swiglu_kernel, static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
