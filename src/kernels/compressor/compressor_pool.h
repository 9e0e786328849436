// The compressor's gated pooling (MODEL.md §4.2-4.3) for one sequence's slice of a batch: every
// block of m positions the slice completes is pooled (softmax over the block's rows per channel
// of score + ape, weights applied to kv), then the state rings take the slice's last rows.
// Rows of positions before the slice come from the rings, the slice's own from the batch, so the
// result equals CpuOps' token-by-token ring updates.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

struct CompressorPoolParams {
  const float* kv = nullptr;      // [slice tokens, width] the slice's rows of x @ wkv^T
  const float* score = nullptr;   // [slice tokens, width] the slice's rows of x @ wgate^T
  FloatPtr ape;                   // [m, width]
  float* state_kv = nullptr;      // [ring, width] ring = coff*m; position p in row p % ring
  float* state_score = nullptr;   // [ring, width] score + ape of the ring's positions
  float* out = nullptr;           // [blocks, dc] one row per block the slice completes, in order
  int64_t width = 0;              // coff * dc
  int64_t ratio = 0;              // m; m == 4 overlaps (coff = 2), otherwise coff = 1
  int64_t start_pos = 0;          // position of the slice's first token
  int64_t num_tokens = 0;
};

// Pools, then updates the rings (stream-ordered, so pooling reads the rings as they were).
void compressor_pool(const CompressorPoolParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
