// Sparse attention with a per-head sink (MODEL.md §3.5-3.6) on bf16 tensor cores, for the
// default numerics: bf16 queries, window rows and compressed entries of head dim 512, bf16
// output. The same entry lists as sparse_attn_rows (kernels/attention/sparse_attn_entries.cuh),
// another fp32 summation order: scores are bf16 x bf16 products (exact in fp32) summed by the
// MMA in fp32; the probabilities enter the value product as three bf16 terms (hi + mid + lo: all
// 24 bits of fp32), so only the order of the fp32 sums differs; the output is rounded to bf16
// once. A token's numbers do not depend on the batch it is in.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention/sparse_attn_rows.h"

namespace dsv4::kernels {

constexpr int64_t kSparseAttnMmaHeadDim = 512;

// How a launch is cut: a token's entry tiles are split over CTAs by a rule of its own entry count
// alone (so batching never changes its numbers); `max_splits` is the batch's most, and the batch
// runs in launches of `tokens_per_launch` tokens so the splits' scratch stays bounded. A CTA takes
// 16 x `pairs` heads (1, 2 or 4), which changes no number: 4 unless fewer fill no more than one
// wave of CTAs (decode), so that small launches spread over more SMs (and `dim_parts` below).
struct SparseAttnMmaPlan {
  int max_splits = 1;
  int pairs = 4;
  // With pairs 1 or 2: the 512 output dims cut into 1, 2 or 4 parts, a CTA each (each recomputes
  // the scores): no number changes; as many as still fit one wave, so that a decode launch's value
  // products spread over more SMs.
  int dim_parts = 1;
  // 64 heads a CTA run on Hopper's warpgroup MMA (kernels/attention/sparse_attn_wgmma.cu), fewer
  // on mma.sync: the same bits either way (F16/SparseAttnWgmma tests); false forces mma.sync.
  bool wgmma = true;
  // Who runs and merges a token's splits (the same bits every way). kMergeKernel: a CTA a split,
  // merged by a kernel after the launch. With wgmma also kLastCtaMerges: a CTA a split, the last
  // to finish merges them (the partials still in L2), faster where a launch is many waves of
  // CTAs, slower in a short one, whose last CTAs' merges become its tail (decode batches); and
  // kCtaPerToken: one CTA runs a token's splits in turn, its queries copied and the next split's
  // entry rows found and first tile copied while the current split computes, then merges them
  // (prefill launches of many waves of tokens).
  enum class Splits { kMergeKernel, kLastCtaMerges, kCtaPerToken };
  Splits splits = Splits::kMergeKernel;
  // With kCtaPerToken over rows (not packed entries): the CTA's two warpgroups each compute every
  // tile's scores and softmax whole (kernels/attention/sparse_attn_wgmma_ws.cu), twice the scores'
  // MMAs for no waits between them; the same bits. Faster where tokens have many splits.
  bool whole_tiles = false;
  int64_t tokens_per_launch = 0;
  size_t workspace_bytes = 0;  // device scratch the launches need (0 when max_splits == 1)
};

// max_entries: the most entries any token of the batch has (window + compressed, valid or not);
// sm_count: the GPU's SMs.
SparseAttnMmaPlan sparse_attn_mma_plan(int64_t tokens, int64_t heads, int64_t max_entries, int sm_count);

// Whether sparse_attn_mma runs `plan` on the WGMMA kernel (64 heads a CTA and wgmma set).
bool sparse_attn_mma_takes_wgmma(const SparseAttnMmaPlan& plan);

// p as for sparse_attn_rows, with q, kv, every window and compressed array and out in bf16 (or,
// with p.packed, kv, the windows and the compressed pools as packed FP8 entries),
// d == kSparseAttnMmaHeadDim and every array 16-byte aligned (the caller checks). `workspace`
// holds plan.workspace_bytes of device memory.
void sparse_attn_mma(const SparseAttnRowsParams& p, const SparseAttnMmaPlan& plan, void* workspace, cudaStream_t stream);

}  // namespace dsv4::kernels
