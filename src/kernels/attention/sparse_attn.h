// Sparse attention with a per-head sink over entries of the paged FP8 cache (MODEL.md §3.6):
// every query token attends to its own list of cache slots (its SWA window plus its compressed
// entries), K = V = the 512-d entry, softmax scale 1/sqrt(512), and the sink joins the
// denominator with a zero value vector. Used for prefill and decode alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kv/fp8_cache_layout.h"

namespace dsv4::kernels {

struct SparseAttnParams {
  const uint16_t* q = nullptr;      // [t, h, 512] bf16
  const uint8_t* cache = nullptr;   // page pool in Fp8CacheLayout
  Fp8CacheLayout layout;
  const int32_t* slots = nullptr;   // [t, k] cache slot per attended entry; -1 = no entry
  const float* sink = nullptr;      // [h] per-head sink logit
  uint16_t* out = nullptr;          // [t, h, 512] bf16; a token with no valid entry gets zeros
  int64_t t = 0;
  int h = 0;
  int k = 0;                        // slots per token (row stride of `slots`)
  float softmax_scale = 0;          // 1/sqrt(512)
};

void sparse_attn_fp8(const SparseAttnParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
