// The sparse changes a request's sampling makes to its logits before the draw, one edit per token
// it touches: logit_bias, the repetition penalty (prompt and output tokens), the presence and
// frequency penalties (output tokens) and bans (bad_words, min_tokens' stop tokens). Built on the
// host from the request and its history (sampler.h's logit_edits), applied by sample_token on the
// host and by Ops::edit_logits on the backend with the same float operations (edited_logit: each
// one exactly rounded, none fused), so both draw from the same logits.
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace dsv4 {

struct LogitEdit {
  static constexpr uint32_t kRepeated = 1;  // in the prompt or the output: the repetition penalty applies
  static constexpr uint32_t kBanned = 2;    // -inf: never drawn

  int32_t row = 0;   // the logits row (a step's sequence)
  int32_t id = 0;    // the token
  float bias = 0.0f;  // logit_bias (duplicates added up)
  float subtract = 0.0f;  // presence + frequency * count over the output
  float repetition_penalty = 1.0f;  // the request's
  uint32_t flags = 0;
};
static_assert(sizeof(LogitEdit) == 24, "LogitEdit is six i32 words");

// x + bias, then divided by the repetition penalty when positive (multiplied when not) for a
// repeated token, then less `subtract`; -inf for a banned token.
DSV4_HD float edited_logit(float x, const LogitEdit& e) {
  if (e.flags & LogitEdit::kBanned) return -INFINITY;
#if defined(__CUDA_ARCH__)
  float v = __fadd_rn(x, e.bias);
  if ((e.flags & LogitEdit::kRepeated) && e.repetition_penalty != 1.0f)
    v = v > 0.0f ? __fdiv_rn(v, e.repetition_penalty) : __fmul_rn(v, e.repetition_penalty);
  return __fsub_rn(v, e.subtract);
#else
  float v = x + e.bias;
  if ((e.flags & LogitEdit::kRepeated) && e.repetition_penalty != 1.0f)
    v = v > 0.0f ? v / e.repetition_penalty : v * e.repetition_penalty;
  return v - e.subtract;
#endif
}

// Applies edits to rows of `cols` logits at x (host; compiled without fused multiply-adds).
void apply_logit_edits(float* x, int64_t cols, const LogitEdit* edits, int64_t count);

}  // namespace dsv4
