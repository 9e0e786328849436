// Launcher of the token draw on the device (CudaOps::sample_rows): sampling/token_draw.h's draw,
// a block per row, giving the host reference draw_token's ids bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sampling/token_draw.h"

namespace dsv4::kernels {

// out[r] = draw_token(row r of x, rows[r]): -1 where no token can be drawn. Temperature-0 rows
// take the argmax (a left-to-right scan keeping the first strictly larger value: the lowest index
// of the largest non-NaN value, or 0 when x[r, 0] is NaN or the row is all NaN).
struct SampleRowsKernelParams {
  const float* x = nullptr;       // [rows, cols]
  const DrawRow* rows = nullptr;  // [rows], device
  int32_t* out = nullptr;         // [rows]
  int64_t rows_count = 0;
  int64_t cols = 0;               // <= kDrawMaxVocab
};
void sample_rows(const SampleRowsKernelParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
