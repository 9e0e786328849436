// Launchers of sampling on the device: the logit edits of sampling/logit_edit.h (CudaOps::edit_logits),
// dense masks (mask_logits), sampling/token_draw.h's draw (CudaOps::sample_rows, a block per row)
// and logprobs (row_logprobs), each giving the host's values (apply_logit_edits, draw_token,
// draw_row_logprobs) bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sampling/logit_edit.h"
#include "sampling/token_draw.h"

namespace dsv4::kernels {

// x[e.row * cols + e.id] = edited_logit(that value, e) for each of the `count` edits (device
// memory); edits outside [rows, cols] are skipped. At most one edit per element (else a race). A
// thread per edit.
struct EditLogitsKernelParams {
  float* x = nullptr;               // [rows, cols]
  const LogitEdit* edits = nullptr;  // [count]
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
};
void edit_logits(const EditLogitsKernelParams& p, cudaStream_t stream);

// x[rows[m], j] = -inf where bit j % 32 of allowed[m * ceil(cols / 32) + j / 32] is 0; masks whose
// row is outside [0, rows) are skipped. A block per mask.
struct MaskLogitsKernelParams {
  float* x = nullptr;                 // [rows, cols]
  const uint32_t* allowed = nullptr;  // [count, ceil(cols / 32)]
  const int32_t* mask_rows = nullptr;  // [count]
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
};
void mask_logits(const MaskLogitsKernelParams& p, cudaStream_t stream);

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

// draw_row_logprobs of row r of x for token ids[r] with top_counts[r] (<= min(top_width,
// kDrawMaxTopLogprobs)) top tokens: logprob[r], rank[r], and top_ids / top_logprobs [r, 0..top_width)
// (-1 / NaN past the row's count). A block per row.
struct RowLogprobsKernelParams {
  const float* x = nullptr;           // [rows, cols]
  const int32_t* ids = nullptr;       // [rows], in [0, cols)
  const int32_t* top_counts = nullptr;  // [rows]
  float* logprob = nullptr;           // [rows]
  int32_t* rank = nullptr;            // [rows]
  int32_t* top_ids = nullptr;         // [rows, top_width]
  float* top_logprobs = nullptr;      // [rows, top_width]
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t top_width = 0;
};
void row_logprobs(const RowLogprobsKernelParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
