// One warp per entry: 7 quantisation blocks of 64 nope dims (amax by shuffle) and the bf16
// rope tail. Rounding comes from core/numeric.h, as on the host.
#include "kernels/attention/kv_cache.h"

#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;
using L = Fp8CacheLayout;

__global__ void kv_cache_insert_fp8_kernel(KvInsertParams p) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  if (row >= p.n) return;
  const int64_t slot = p.slots[row];
  if (slot < 0) return;
  const uint16_t* src = p.kv + row * L::kHeadDim;
  uint8_t* data = p.cache + p.layout.data_offset(slot);
  uint8_t* scales = p.cache + p.layout.scale_offset(slot);
  for (int b = 0; b < L::kScalesPerEntry; ++b) {  // each lane holds 2 of the block's 64 values
    const float v0 = bf16_to_float(src[b * 64 + lane * 2]);
    const float v1 = bf16_to_float(src[b * 64 + lane * 2 + 1]);
    float amax = fmaxf(fabsf(v0), fabsf(v1));
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const int e = pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
    data[b * 64 + lane * 2] = float_to_e4m3(ldexpf(v0, -e));
    data[b * 64 + lane * 2 + 1] = float_to_e4m3(ldexpf(v1, -e));
    if (lane == 0) scales[b] = e8m0_from_exponent(e);
  }
  uint16_t* rope = reinterpret_cast<uint16_t*>(data + L::kNopeDim);
  rope[lane * 2] = src[L::kNopeDim + lane * 2];
  rope[lane * 2 + 1] = src[L::kNopeDim + lane * 2 + 1];
  if (lane == 0) scales[L::kScalesPerEntry] = 0;
}

}  // namespace

void kv_cache_insert_fp8(const KvInsertParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const auto blocks = static_cast<unsigned>((p.n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_pdl(kv_cache_insert_fp8_kernel, blocks, kWarpsPerBlock * 32, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
