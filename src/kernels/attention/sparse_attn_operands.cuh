// The WGMMA sparse attention kernels' (sparse_attn_wgmma.cu, sparse_attn_wgmma_ws.cu) operands in
// shared memory: 64-row operands of 512 dims as WGMMA's 128-byte-swizzled tiles (8 column blocks
// of 64 rows x 128 bytes, chunk c of row r at chunk c ^ (r % 8)), the copies of the queries and of
// an entry tile's rows into them, and the scores' MMAs over them.
#pragma once

#include <cstdint>

#include "kernels/attention/sparse_attn_softmax.cuh"
#include "kernels/gemm/wgmma.cuh"

namespace dsv4::kernels::sparse_attn_tc {

constexpr int kOperandRows = 64;                 // heads or entries: the MMAs' M, or a tile
constexpr int kBlockBytes = kOperandRows * 128;  // a column block: 64 rows x 64 bf16
constexpr int kOperandBytes = 8 * kBlockBytes;   // 64 rows x 512 dims
constexpr int kChunks = kD / 8;                  // 16-byte chunks of a 512-d bf16 row

// Byte offset of 16-byte chunk c (of kChunks) of row r in a swizzled 64-row operand.
__device__ __forceinline__ int swizzled(int r, int c) {
  return (c / 8) * kBlockBytes + r * 128 + ((c % 8) ^ (r % 8)) * 16;
}

// Starts the copies (cp.async; the caller commits) of batch token i's 64 heads' queries from head0
// on into the operand at `q`, zeros past the last head: thread tid of kThreads.
template <int kThreads>
__device__ __forceinline__ void copy_queries(const SparseAttnRowsParams& p, int64_t i, int64_t head0, uint8_t* q,
                                             int tid) {
  const auto* from = static_cast<const uint16_t*>(p.q.data);
  for (int c = tid; c < kOperandRows * kChunks; c += kThreads) {
    const int h = c / kChunks, chunk = c % kChunks;
    uint8_t* dst = q + swizzled(h, chunk);
    if (head0 + h < p.heads) cp_async16(dst, from + (i * p.heads + head0 + h) * kD + chunk * 8);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

// Starts the copies (cp.async; the caller commits) of a tile's entry rows `rows` into the operand
// at `kv`, zeros for a missing entry (nullptr): thread tid of kThreads copies chunk tid % 64 of
// entries tid / 64, tid / 64 + kThreads / 64, ... (a warp: half a row, 8 lanes a 128-byte swizzled
// row segment).
template <int kThreads>
__device__ __forceinline__ void copy_tile_rows(const uint16_t* const* rows, uint8_t* kv, int tid) {
  const int chunk = tid % kChunks;
  for (int e = tid / kChunks; e < kTile; e += kThreads / kChunks) {
    const uint16_t* row = rows[e];
    uint8_t* dst = kv + swizzled(e, chunk);
    if (row != nullptr) cp_async16(dst, row + chunk * 8);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

// The 64 heads' scores (q at q_at) against kEntries (32 or 64) entry rows from kv_at, K steps of
// 16 dims in order from zeroed sums, issued as one WGMMA group (the caller waits for it).
template <int kEntries>
__device__ __forceinline__ void issue_scores(float (&s)[kEntries / 2], uint32_t q_at, uint32_t kv_at) {
  static_assert(kEntries == 32 || kEntries == 64, "issue_scores: half a tile or a whole one");
#pragma unroll
  for (float& v : s) v = 0.0f;
  fence_accumulators(s);
  wgmma_fence();
#pragma unroll
  for (int k0 = 0; k0 < kD; k0 += 16) {
    const uint32_t k_bytes = (k0 / 64) * kBlockBytes + (k0 % 64) * 2;
    const uint64_t desc_q = wgmma_descriptor(q_at + k_bytes), desc_kv = wgmma_descriptor(kv_at + k_bytes);
    if constexpr (kEntries == 32) wgmma_m64n32k16_bf16(s, desc_q, desc_kv);
    else wgmma_m64n64k16_bf16(s, desc_q, desc_kv);
  }
  wgmma_commit();
}

}  // namespace dsv4::kernels::sparse_attn_tc
