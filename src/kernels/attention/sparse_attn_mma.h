// Sparse attention with a per-head sink (MODEL.md §3.5-3.6) on bf16 tensor cores, for the
// default numerics: bf16 queries, window rows and compressed entries of head dim 512, bf16
// output. The same entry lists as sparse_attn_rows (kernels/attention/sparse_attn_entries.cuh),
// another fp32 summation order: scores are bf16 x bf16 products (exact in fp32) summed by the
// MMA in fp32; the probabilities enter the value product as a bf16 pair (hi + lo, 16 significant
// bits) so they lose about as little as fp32 would; the output is rounded to bf16 once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention/sparse_attn_rows.h"

namespace dsv4::kernels {

constexpr int64_t kSparseAttnMmaHeadDim = 512;

// How a launch is cut: each token's entry tiles are split over `splits` CTAs when the batch alone
// would leave the GPU idle (decode), and a second kernel merges the splits' partial softmaxes.
struct SparseAttnMmaPlan {
  int splits = 1;
  size_t workspace_bytes = 0;  // device scratch the launch needs (0 when splits == 1)
};

// max_entries: the most entries any token of the batch has (window + compressed, valid or not).
SparseAttnMmaPlan sparse_attn_mma_plan(int64_t tokens, int64_t heads, int64_t max_entries);

// p as for sparse_attn_rows, with q, kv, every window and compressed array and out in bf16,
// d == kSparseAttnMmaHeadDim and every array 16-byte aligned (the caller checks). `workspace`
// holds plan.workspace_bytes of device memory.
void sparse_attn_mma(const SparseAttnRowsParams& p, const SparseAttnMmaPlan& plan, void* workspace, cudaStream_t stream);

}  // namespace dsv4::kernels
