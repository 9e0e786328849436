// What a request asks of the sampler: how the next token is drawn from the model's logits and
// which logprobs come back. Plain values, checked once by validate() at submission.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace dsv4 {

struct SamplingParams {
  // 0: greedy (argmax; the filters and the seed are then ignored). > 0: the logits are divided by
  // it before the filters.
  float temperature = 1.0f;
  float top_p = 1.0f;   // (0, 1]: keep the smallest set of most likely tokens whose mass >= top_p
  int32_t top_k = 0;    // 0 (or -1): off; else keep the k most likely tokens
  float min_p = 0.0f;   // [0, 1]: drop tokens whose probability < min_p * the top probability
  // The request's random stream. Seeded requests draw the same tokens alone, in any batch and
  // after a preemption (the draw for output token i depends only on the seed and i). Unseeded
  // requests get a seed from the engine at submission.
  std::optional<uint64_t> seed;
  // OpenAI's penalties over the tokens generated so far: logit -= presence (once per token seen)
  // + frequency * count. [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // The CTRL/Hugging Face penalty over prompt and generated tokens: positive logits divided by
  // it, negative ones multiplied. > 0; 1 is off.
  float repetition_penalty = 1.0f;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to that token's logit before the
  // penalties; -100 in effect bans a token, 100 all but forces it. The ids are checked against
  // the vocabulary by the engine.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's allowed_token_ids: when not empty, only these tokens may be drawn; every other logit is
  // -inf after logit_bias and the penalties, as with an output constraint's mask (the allowed set
  // is then the intersection of the two). Duplicates are harmless. The ids are checked against the
  // vocabulary by the engine.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words as token id sequences (the server tokenizes the words; see
  // server/http_server.cpp): at each step the last token of a sequence gets logit -inf when the
  // output tokens generated so far end with the sequence's other tokens, so a one-token sequence
  // is never drawn and a longer one never completed. The prompt does not count, as in vLLM. Applied
  // where allowed_token_ids is. Each sequence is non-empty; the ids are checked against the
  // vocabulary by the engine.
  std::vector<std::vector<int32_t>> bad_words_ids;
  // Return the sampled token's logprob, and the `top_logprobs` most likely tokens with theirs.
  // Logprobs are those of the model's raw distribution (log_softmax of the logits, before
  // penalties, temperature and filters), as vLLM returns by default.
  bool logprobs = false;
  int32_t top_logprobs = 0;  // [0, 20]; needs logprobs

  // Throws UsageError naming the first field out of range and its value.
  void validate() const;
};

}  // namespace dsv4
