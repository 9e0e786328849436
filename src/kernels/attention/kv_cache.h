// Writing attention entries (SWA raw tokens or compressed entries) into the paged FP8 cache of
// kv/fp8_cache_layout.h: the 448 nope dims are quantised to e4m3 with one pow2 scale per 64
// (the QAT rounding of MODEL.md §3.4, so reading back gives exactly the QAT values), the 64
// rope dims are stored as bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kv/fp8_cache_layout.h"

namespace dsv4::kernels {

struct KvInsertParams {
  const uint16_t* kv = nullptr;     // [n, 512] bf16 (after RMSNorm and RoPE)
  const int64_t* slots = nullptr;   // [n] destination slot ids; a negative slot skips the row
  uint8_t* cache = nullptr;         // the page pool
  Fp8CacheLayout layout;
  int64_t n = 0;
};

void kv_cache_insert_fp8(const KvInsertParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
