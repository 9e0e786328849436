// A straightforward CUDA-core implementation: one CTA per (token, group of 8 heads) (grid x =
// tokens, y = head groups), entries in
// tiles of 32 dequantised into shared memory once for all 8 heads (MQA: the heads share K/V),
// online softmax per head, fp32 throughout. Correct first; tensor cores come later.
#include "kernels/attention/sparse_attn.h"

#include <cmath>

#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/per_device_once.h"

namespace dsv4::kernels {
namespace {

using L = Fp8CacheLayout;
constexpr int kHeadsPerCta = 8;   // one warp per head
constexpr int kTile = 32;         // entries per tile, one per lane in the score phase
constexpr int kRowStride = L::kHeadDim + 1;  // padding: lanes reading one column hit distinct banks
constexpr int kDimsPerLane = L::kHeadDim / 32;

constexpr size_t kSmemBytes = sizeof(float) * (kHeadsPerCta * L::kHeadDim + kTile * kRowStride +
                                               kHeadsPerCta * kTile);

__device__ float load_entry_dim(const uint8_t* data, const uint8_t* scales, int d) {
  if (d < L::kNopeDim) return e4m3_to_float(data[d]) * e8m0_to_float(scales[d / L::kQuantBlock]);
  return bf16_to_float(reinterpret_cast<const uint16_t*>(data + L::kNopeDim)[d - L::kNopeDim]);
}

__global__ void __launch_bounds__(kHeadsPerCta * 32) sparse_attn_fp8_kernel(SparseAttnParams p) {
  pdl_wait();
  extern __shared__ float smem[];
  float* q_s = smem;                                 // [8][512]
  float* kv_s = q_s + kHeadsPerCta * L::kHeadDim;    // [32][513]
  float* p_s = kv_s + kTile * kRowStride;            // [8][32]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tok = blockIdx.x;
  const int head = blockIdx.y * kHeadsPerCta + warp;
  const bool head_valid = head < p.h;

  for (int i = threadIdx.x; i < kHeadsPerCta * L::kHeadDim; i += blockDim.x) {
    const int hh = blockIdx.y * kHeadsPerCta + i / L::kHeadDim;
    q_s[i] = hh < p.h ? bf16_to_float(p.q[(tok * p.h + hh) * L::kHeadDim + i % L::kHeadDim]) : 0.0f;
  }

  float m = -INFINITY, l = 0.0f;
  float o[kDimsPerLane];
  for (float& v : o) v = 0.0f;
  const int32_t* slots = p.slots + tok * p.k;

  for (int base = 0; base < p.k; base += kTile) {
    __syncthreads();  // q_s ready (first tile) / previous tile fully consumed
    for (int e = warp; e < kTile; e += kHeadsPerCta) {
      const int32_t slot = base + e < p.k ? slots[base + e] : -1;
      float* row = kv_s + e * kRowStride;
      if (slot < 0) {
        for (int d = lane; d < L::kHeadDim; d += 32) row[d] = 0.0f;
      } else {
        const uint8_t* data = p.cache + p.layout.data_offset(slot);
        const uint8_t* scales = p.cache + p.layout.scale_offset(slot);
        for (int d = lane; d < L::kHeadDim; d += 32) row[d] = load_entry_dim(data, scales, d);
      }
    }
    __syncthreads();

    // Scores: warp = head, lane = entry.
    const int32_t my_slot = base + lane < p.k ? slots[base + lane] : -1;
    float s = -INFINITY;
    if (my_slot >= 0) {
      const float* qh = q_s + warp * L::kHeadDim;
      const float* kv = kv_s + lane * kRowStride;
      float dot = 0.0f;
      for (int d = 0; d < L::kHeadDim; ++d) dot = fmaf(qh[d], kv[d], dot);
      s = dot * p.softmax_scale;
    }
    float tile_max = s;
    for (int off = 16; off > 0; off /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // nothing valid yet for this token
    const float correction = expf(m - m_new);  // 0 when m was -inf
    const float prob = expf(s - m_new);         // 0 for invalid entries
    float tile_sum = prob;
    for (int off = 16; off > 0; off /= 2) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, off);
    l = l * correction + tile_sum;
    m = m_new;
    p_s[warp * kTile + lane] = prob;
    __syncwarp();
    for (int j = 0; j < kDimsPerLane; ++j) {
      float acc = o[j] * correction;
      for (int e = 0; e < kTile; ++e) acc = fmaf(p_s[warp * kTile + e], kv_s[e * kRowStride + lane + 32 * j], acc);
      o[j] = acc;
    }
    __syncwarp();
  }

  if (!head_valid) return;
  uint16_t* dst = p.out + (tok * p.h + head) * L::kHeadDim;
  const float inv_den = m == -INFINITY ? 0.0f : 1.0f / (l + expf(p.sink[head] - m));
  for (int j = 0; j < kDimsPerLane; ++j) dst[lane + 32 * j] = float_to_bf16(o[j] * inv_den);
}

}  // namespace

void sparse_attn_fp8(const SparseAttnParams& p, cudaStream_t stream) {
  if (p.t == 0 || p.h == 0) return;
  static PerDeviceOnce configured;
  once_per_device(configured, [] {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmemBytes)));
  });
  const dim3 grid(static_cast<unsigned>(p.t), static_cast<unsigned>((p.h + kHeadsPerCta - 1) / kHeadsPerCta));
  launch_pdl(sparse_attn_fp8_kernel, grid, kHeadsPerCta * 32, kSmemBytes, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
