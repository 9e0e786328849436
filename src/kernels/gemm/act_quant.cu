// One warp per (row, 128-wide K block): amax by shuffle, pow2 scale, e4m3 codes. The scalar
// rounding is core/numeric.h's, identical to the CPU reference.
#include "kernels/gemm/act_quant.h"

#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void act_quant_fp8_kernel(ActQuantParams p) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t kblocks = p.k / 128;
  const int64_t task = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (task >= p.m_padded * kblocks) return;
  const int64_t row = task / kblocks, kb = task % kblocks;
  uint8_t* q = p.q + row * p.k + kb * 128 + lane * 4;
  if (row >= p.m) {  // padding rows: zeros with a unit scale
    *reinterpret_cast<uint32_t*>(q) = 0;
    if (lane == 0) p.scale[kb * p.m_padded + row] = 1.0f;
    return;
  }
  const uint2 raw = *reinterpret_cast<const uint2*>(p.x + row * p.k + kb * 128 + lane * 4);
  float v[4] = {bf16_to_float(raw.x & 0xffff), bf16_to_float(raw.x >> 16), bf16_to_float(raw.y & 0xffff),
                bf16_to_float(raw.y >> 16)};
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const int e = pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
  uint32_t packed = 0;
  for (int i = 0; i < 4; ++i) packed |= static_cast<uint32_t>(float_to_e4m3(ldexpf(v[i], -e))) << (8 * i);
  *reinterpret_cast<uint32_t*>(q) = packed;
  if (lane == 0) p.scale[kb * p.m_padded + row] = ldexpf(1.0f, e);
}

}  // namespace

void act_quant_fp8(const ActQuantParams& p, cudaStream_t stream) {
  const int64_t tasks = p.m_padded * (p.k / 128);
  const auto blocks = static_cast<unsigned>((tasks + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (blocks == 0) return;
  launch_pdl(act_quant_fp8_kernel, blocks, kWarpsPerBlock * 32, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
