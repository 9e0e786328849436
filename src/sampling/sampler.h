// Host-side sampling of one token from a request's logits: penalties, masks, temperature, min-p,
// top-k, top-p, a counter-based random draw (token_draw.h), and the raw logprobs. Stateless: the
// draw for output token i depends only on (seed, i), and the penalties only on the token history
// passed in, so a request samples the same tokens alone, in any batch and after a recompute.
//
// Runs on the downloaded logits on the host. The serving engine draws on the backend instead
// (Ops::edit_logits with logit_edits' edits, Ops::mask_logits with the same masks,
// Ops::sample_rows, Ops::row_logprobs: the same logits, draw and logprobs), which saves the
// [sequences, V] download and the host's pass over it; this is its path in steps that need every
// token's logits (prompt logprobs) and with EngineConfig::sample_on_backend off.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sampling/logit_edit.h"
#include "sampling/sampling_params.h"
#include "sampling/token_draw.h"

namespace dsv4 {

struct TokenChoice {
  int32_t id = 0;
  float logprob = 0.0f;                          // params.logprobs: log_softmax(logits)[id]
  std::vector<std::pair<int32_t, float>> top;    // params.top_logprobs (id, logprob), best first
  int32_t rank = 0;                              // params.logprobs: 1 + the tokens of larger logit (vLLM's)
};

struct TokenHistory {
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;  // the tokens generated so far
};

// The next token from `logits` ([V] of the model, untouched). Order of the processing, as in
// vLLM: logit_bias, repetition penalty (prompt and output tokens), presence and frequency penalties (output
// tokens), then greedy argmax (temperature 0; ties go to the lowest id) or token_draw.h's draw:
// temperature, min-p, top-k and top-p over the tokens in logit order, and one uniform draw from
// counter_bits(seed, output.size()) over integer weights, so the backends' sample_rows pick the
// same token. A draw costs O(V): no filter sorts the whole vocabulary.
//
// `allowed` (a constraint such as json_token_mask.h's): empty, every token may be drawn; else one
// entry per logit, and only tokens whose entry is non-zero are: the others get no probability
// after the penalties, so temperature, min-p, top-k and top-p act on the allowed tokens alone.
// params.allowed_token_ids, when not empty, restricts the choice the same way, at the same point,
// and params.bad_words_ids takes out the tokens banned_by_bad_words names for history.output; a
// token must pass all three. The logprobs stay those of the raw logits. Throws UsageError for
// empty logits, a history, logit_bias, allowed_token_ids or bad_words_ids id outside them, an
// empty bad_words_ids sequence, an `allowed` of another size, when no token is left to draw, or
// when no token has a probability at the temperature (NaN or infinite logits).
TokenChoice sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                         const TokenHistory& history, std::span<const uint8_t> allowed = {});

// The draw (token_draw.h) of `params` for the output token `index` of a request seeded `seed`.
DrawRow draw_row_of(const SamplingParams& params, uint64_t seed, uint64_t index);

// The logit edits (logit_edit.h) of a step of a request with `params` after `history`, for row
// `row` of the step's logits, one per token touched in ascending id: logit_bias (an id's entries
// added up), the repetition penalty over prompt and output tokens, the presence and frequency
// penalties over the output, and the `banned` tokens. What sample_token applies before its masks;
// the engine applies them on the backend (Ops::edit_logits) for a draw there. Throws UsageError
// for a history, logit_bias or banned id outside the vocabulary of `vocab`.
std::vector<LogitEdit> logit_edits(const SamplingParams& params, const TokenHistory& history,
                                   std::span<const int32_t> banned, size_t vocab, int32_t row = 0);

// vLLM's bad_words at one step: the last token of each sequence of `bad_words_ids` whose other
// tokens are the last tokens of `output` (the tokens generated so far, not the prompt's, as in
// vLLM), so a one-token sequence always. Duplicates are possible. Throws UsageError for an empty
// sequence.
std::vector<int32_t> banned_by_bad_words(std::span<const std::vector<int32_t>> bad_words_ids,
                                         std::span<const int32_t> output);

// Whether sample_token, given these `allowed`, `params` and output tokens, has a token left to
// draw among `vocab` (the engine ends a request that has none instead of sampling it). Throws as
// sample_token does for ids outside the vocabulary and a mask of another size.
bool any_token_drawable(size_t vocab, std::span<const uint8_t> allowed, const SamplingParams& params,
                        std::span<const int32_t> output);

// Token `id`'s logprob under `logits` (log_softmax by token_draw.h's draw_row_logprobs, the
// backends' bits), its rank and the `top_logprobs` most likely tokens with theirs (ties by id):
// what sample_token returns with logprobs, for a given token (a prompt's, for prompt logprobs).
// Throws UsageError for an id outside the logits.
TokenChoice token_logprobs(std::span<const float> logits, int32_t id, int32_t top_logprobs);

}  // namespace dsv4
