// The compressor's gated pooling (MODEL.md §4.2-4.3) for every sequence's slice of a batch, in
// two launches for the batch: every block of m positions a slice completes is pooled (softmax over
// the block's rows per channel of score + ape, weights applied to kv), then the state rings take
// the slice's last rows. Rows of positions before the slice come from the rings, the slice's own
// from the batch, so the result equals CpuOps' token-by-token ring updates.
//
// The work lists depend on the slices' token counts alone, not on their positions (read on the
// device): a slice of n tokens has ceil(n / m) block rows, of which those whose block it does not
// complete are written as zeros. So a CUDA graph captured at one decode step is right at the next.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

struct CompressorPoolParams {
  const float* kv = nullptr;      // [slice tokens, width] the slice's rows of x @ wkv^T
  const float* score = nullptr;   // [slice tokens, width] the slice's rows of x @ wgate^T
  FloatPtr ape;                   // [m, width]
  float* state_kv = nullptr;      // [ring, width] ring = coff*m; position p in row p % ring
  float* state_score = nullptr;   // [ring, width] score + ape of the ring's positions
  float* out = nullptr;           // [ceil(num_tokens / m), dc] row i: block floor(start / m) + i
  int64_t width = 0;              // coff * dc
  int64_t ratio = 0;              // m; m == 4 overlaps (coff = 2), otherwise coff = 1
  const int32_t* start_pos = nullptr;  // device: the position of the slice's first token
  int64_t num_tokens = 0;
};

// The work of one launch pair (device arrays): a CTA row per block row (pool) and per ring row
// written (ring), each naming its sequence and its index there.
struct CompressorPoolItem {
  int32_t seq = 0;    // into seqs
  int32_t index = 0;  // pool: the block row; ring: the row's index from the slice's first ring
                      // row written
};
struct CompressorPoolBatch {
  const CompressorPoolParams* seqs = nullptr;   // [sequences] one per slice with tokens
  const CompressorPoolItem* pool_items = nullptr;
  const CompressorPoolItem* ring_items = nullptr;
  int64_t pool_count = 0;
  int64_t ring_count = 0;
  int64_t width = 0;                            // coff * dc, the same for every sequence
  int64_t ratio = 0;
};

// The host side of a batch: the per-sequence params and the items, in one host array each.
struct CompressorPoolPlan {
  std::vector<CompressorPoolParams> seqs;
  std::vector<CompressorPoolItem> pool_items;
  std::vector<CompressorPoolItem> ring_items;
};
// Appends one slice (skipped when it has no tokens).
void add_compressor_slice(CompressorPoolPlan& plan, const CompressorPoolParams& p);

// Pools, then updates the rings (stream-ordered, so pooling reads the rings as they were).
void compressor_pool(const CompressorPoolBatch& b, cudaStream_t stream);

}  // namespace dsv4::kernels
