// SamplingParams::validate: every field against its range, with the value in the message.
#include "sampling/sampling_params.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "sampling/token_draw.h"

namespace dsv4 {

namespace {

void require(bool ok, const char* field, double value, const char* rule) {
  if (!ok) throw UsageError(std::string(field) + " = " + std::to_string(value) + ": must be " + rule);
}

}  // namespace

void SamplingParams::validate() const {
  require(std::isfinite(temperature) && temperature >= 0.0f, "temperature", temperature, ">= 0");
  require(top_p > 0.0f && top_p <= 1.0f, "top_p", top_p, "in (0, 1]");
  require(top_k >= -1, "top_k", top_k, "-1, 0 (off) or positive");
  require(min_p >= 0.0f && min_p <= 1.0f, "min_p", min_p, "in [0, 1]");
  require(presence_penalty >= -2.0f && presence_penalty <= 2.0f, "presence_penalty", presence_penalty, "in [-2, 2]");
  require(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f, "frequency_penalty", frequency_penalty,
          "in [-2, 2]");
  require(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f, "repetition_penalty", repetition_penalty,
          "> 0");
  for (const auto& [id, bias] : logit_bias) {
    require(id >= 0, "logit_bias token id", id, "a token id (>= 0)");
    require(bias >= -100.0f && bias <= 100.0f, "logit_bias value", bias, "in [-100, 100]");
  }
  for (int32_t id : allowed_token_ids) require(id >= 0, "allowed_token_ids token id", id, "a token id (>= 0)");
  for (size_t i = 0; i < bad_words_ids.size(); ++i) {
    if (bad_words_ids[i].empty())
      throw UsageError("bad_words_ids[" + std::to_string(i) + "] is empty: must be a sequence of token ids");
    for (int32_t id : bad_words_ids[i]) require(id >= 0, "bad_words_ids token id", id, "a token id (>= 0)");
  }
  require(top_logprobs >= 0 && top_logprobs <= kDrawMaxTopLogprobs, "top_logprobs", top_logprobs, "in [0, 20]");
  static_assert(kDrawMaxTopLogprobs == 20, "the message above names the bound");
  require(logprobs || top_logprobs == 0, "top_logprobs", top_logprobs, "0 unless logprobs is requested");
}

}  // namespace dsv4
