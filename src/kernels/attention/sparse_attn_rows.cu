// One CTA per (token, group of 8 heads), a warp per head; entries go through shared memory in
// tiles of 32 (lane = entry while scoring, lane = dims while accumulating). To keep CpuOps'
// operation order (scores, their max, the sum of exp in entry order, then the weighted sum in
// entry order, no contraction) the entries are visited three times: max, sum, output. Only
// expf's last bit can differ from the CPU.
#include "kernels/attention/sparse_attn_rows.h"

#include <string>

#include "core/error.h"
#include "kernels/attention/sparse_attn_entries.cuh"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kHeadsPerCta = 8;
constexpr int kTile = 32;

// CpuOps' dot: 8 running partial sums, combined pairwise.
__device__ float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i + j], b[i + j]));
  for (int j = 0; i < n; ++i, ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i], b[i]));
  return __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])),
                   __fadd_rn(__fadd_rn(acc[4], acc[5]), __fadd_rn(acc[6], acc[7])));
}

__global__ void __launch_bounds__(kHeadsPerCta * 32) sparse_attn_rows_kernel(SparseAttnRowsParams p) {
  pdl_wait();
  extern __shared__ float smem[];
  const int64_t d = p.d, stride = d + 1;  // odd row stride: lanes reading one column hit distinct banks
  float* q_s = smem;                       // [8][d]
  float* o_s = q_s + kHeadsPerCta * d;     // [8][d]
  float* kv_s = o_s + kHeadsPerCta * d;    // [32][d + 1]
  __shared__ EntrySource src_s[kTile];
  __shared__ float w_s[kHeadsPerCta][kTile];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = blockIdx.x;  // the batch token
  const SparseAttnSeq seq = p.seqs[p.seq_of_token[i]];
  const int64_t pos = p.positions[i];
  const int64_t head = blockIdx.y * static_cast<int64_t>(kHeadsPerCta) + warp;
  const bool head_valid = head < p.heads;
  const int64_t S = entry_count(p, pos);

  for (int64_t x = threadIdx.x; x < kHeadsPerCta * d; x += blockDim.x) {
    const int64_t h = blockIdx.y * static_cast<int64_t>(kHeadsPerCta) + x / d;
    q_s[x] = h < p.heads ? load_float(p.q, (i * p.heads + h) * d + x % d) : 0.0f;
    o_s[x] = 0.0f;
  }

  // Loads tile `base` into kv_s (invalid entries as zeros) and src_s.
  auto load_tile = [&](int64_t base) {
    __syncthreads();  // the previous tile is consumed
    if (threadIdx.x < kTile) {
      const int64_t e = base + threadIdx.x;
      src_s[threadIdx.x] = e < S ? entry_source(p, seq, i, pos, e) : EntrySource{};
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < kTile * d; x += blockDim.x) {
      const int64_t e = x / d, c = x % d;
      const EntrySource s = src_s[e];
      kv_s[e * stride + c] = s.valid ? load_float(s.rows, s.row * d + c) : 0.0f;
    }
    __syncthreads();
  };
  const float* qh = q_s + warp * d;
  auto score = [&]() { return __fmul_rn(dot8(qh, kv_s + lane * stride, d), p.softmax_scale); };

  float mx = -INFINITY;
  for (int64_t base = 0; base < S; base += kTile) {
    load_tile(base);
    if (head_valid && src_s[lane].valid) mx = fmaxf(mx, score());
  }
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));

  float sum = 0.0f;
  for (int64_t base = 0; base < S; base += kTile) {
    load_tile(base);
    const bool valid = head_valid && src_s[lane].valid;
    const float ez = valid ? expf(__fsub_rn(score(), mx)) : 0.0f;
    for (int e = 0; e < kTile; ++e) {
      const float v = __shfl_sync(0xffffffffu, ez, e);
      if (src_s[e].valid) sum = __fadd_rn(sum, v);
    }
  }
  const float den = head_valid ? __fadd_rn(sum, expf(__fsub_rn(load_float(p.sink, head), mx))) : 1.0f;

  float* oh = o_s + warp * d;
  for (int64_t base = 0; base < S; base += kTile) {
    load_tile(base);
    const bool valid = head_valid && src_s[lane].valid;
    w_s[warp][lane] = valid ? __fdiv_rn(expf(__fsub_rn(score(), mx)), den) : 0.0f;
    __syncwarp();
    for (int e = 0; e < kTile; ++e) {
      if (!src_s[e].valid) continue;
      const float w = w_s[warp][e];
      for (int64_t c = lane; c < d; c += 32) oh[c] = __fadd_rn(oh[c], __fmul_rn(w, kv_s[e * stride + c]));
    }
    __syncwarp();
  }
  if (!head_valid) return;
  for (int64_t c = lane; c < d; c += 32) store_float(p.out, (i * p.heads + head) * d + c, oh[c]);
}

}  // namespace

size_t sparse_attn_rows_smem_bytes(int64_t d) {
  return static_cast<size_t>(2 * kHeadsPerCta * d + kTile * (d + 1)) * sizeof(float);
}

void sparse_attn_rows(const SparseAttnRowsParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.heads <= 0) return;
  const size_t smem = sparse_attn_rows_smem_bytes(p.d);
  int device = 0, max_smem = 0;
  DSV4_CUDA_CHECK(cudaGetDevice(&device));
  DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem + sizeof(EntrySource) * kTile + sizeof(float) * kHeadsPerCta * kTile > static_cast<size_t>(max_smem))
    throw UsageError("sparse_attention: head dim " + std::to_string(p.d) + " needs more shared memory than the device has");
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.heads + kHeadsPerCta - 1) / kHeadsPerCta));
  launch_pdl(sparse_attn_rows_kernel, grid, kHeadsPerCta * 32, smem, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
