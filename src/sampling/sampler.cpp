// sample_token: the penalties and masks of sampler.h, then token_draw.h's draw.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "sampling/token_draw.h"

namespace dsv4 {

namespace {

void check_ids(std::span<const int32_t> ids, size_t vocab) {
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= vocab)
      throw UsageError("sample_token: token id " + std::to_string(id) + " outside the vocabulary of " +
                       std::to_string(vocab));
}

// A constraint's mask is empty (no constraint) or has one entry per logit.
void check_mask_size(std::span<const uint8_t> allowed, size_t vocab) {
  if (!allowed.empty() && allowed.size() != vocab)
    throw UsageError("sample_token: the allowed-token mask has " + std::to_string(allowed.size()) +
                     " entries for " + std::to_string(vocab) + " logits");
}

// One entry per logit, non-zero for the tokens the step may draw: those `allowed` allows (when it
// is not empty), listed in allowed_token_ids (when that is not empty) and not banned by
// bad_words_ids now. Empty when every token may be drawn. Checks the sizes and ids against the vocabulary.
std::vector<uint8_t> drawable_tokens(size_t vocab, std::span<const uint8_t> allowed, const SamplingParams& params,
                                     std::span<const int32_t> output) {
  check_mask_size(allowed, vocab);
  std::vector<uint8_t> keep(allowed.begin(), allowed.end());
  if (!params.allowed_token_ids.empty()) {
    std::vector<uint8_t> listed(vocab, 0);
    for (int32_t id : params.allowed_token_ids) {
      if (id < 0 || static_cast<size_t>(id) >= vocab)
        throw UsageError("sample_token: allowed_token_ids names token " + std::to_string(id) + " of " +
                         std::to_string(vocab));
      listed[static_cast<size_t>(id)] = 1;
    }
    if (keep.empty()) {
      keep = std::move(listed);
    } else {
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = keep[i] != 0 && listed[i] != 0;
    }
  }
  for (const std::vector<int32_t>& word : params.bad_words_ids)
    for (int32_t id : word)
      if (id < 0 || static_cast<size_t>(id) >= vocab)
        throw UsageError("sample_token: bad_words_ids names token " + std::to_string(id) + " of " +
                         std::to_string(vocab));
  const std::vector<int32_t> banned = banned_by_bad_words(params.bad_words_ids, output);
  if (!banned.empty() && keep.empty()) keep.assign(vocab, 1);
  for (int32_t id : banned) keep[static_cast<size_t>(id)] = 0;
  return keep;
}

// Takes the tokens drawable_tokens leaves out of the choice: -inf logits, no probability at any
// temperature. A constraint's mask alone (every constrained request's step) is read where it is,
// not copied.
void apply_drawable(std::vector<float>& x, std::span<const uint8_t> allowed, const SamplingParams& params,
                    std::span<const int32_t> output) {
  std::vector<uint8_t> combined;
  std::span<const uint8_t> keep = allowed;
  if (params.allowed_token_ids.empty() && params.bad_words_ids.empty()) {
    check_mask_size(allowed, x.size());
  } else {
    combined = drawable_tokens(x.size(), allowed, params, output);
    keep = combined;
  }
  if (keep.empty()) return;
  if (std::find_if(keep.begin(), keep.end(), [](uint8_t a) { return a != 0; }) == keep.end())
    throw UsageError("sample_token: no token is left to draw once the allowed-token mask, allowed_token_ids and "
                     "bad_words_ids are applied");
  for (size_t i = 0; i < x.size(); ++i)
    if (keep[i] == 0) x[i] = -std::numeric_limits<float>::infinity();
}

// Draws from the temperature-scaled, filtered distribution of the penalised logits `x` (the argmax
// at temperature 0) by token_draw.h's rule, the one the backends' sample_rows follow.
int32_t draw(const std::vector<float>& x, const SamplingParams& params, uint64_t seed, uint64_t draw_index) {
  const int32_t id = draw_token(x.data(), static_cast<int64_t>(x.size()), draw_row_of(params, seed, draw_index));
  if (id < 0)
    throw UsageError("sample_token: no token has a probability (the logits' largest value is " +
                     std::to_string(*std::max_element(x.begin(), x.end())) + ")");
  return id;
}

}  // namespace

DrawRow draw_row_of(const SamplingParams& params, uint64_t seed, uint64_t index) {
  DrawRow row;
  row.seed = seed;
  row.index = index;
  row.temperature = params.temperature;
  row.top_p = params.top_p;
  row.min_p = params.min_p;
  row.top_k = params.top_k;
  return row;
}

std::vector<LogitEdit> logit_edits(const SamplingParams& params, const TokenHistory& history,
                                   std::span<const int32_t> banned, size_t vocab, int32_t row) {
  check_ids(history.prompt, vocab);
  check_ids(history.output, vocab);
  std::map<int32_t, LogitEdit> edits;  // by id: ascending, one each
  auto edit = [&](int32_t id) -> LogitEdit& {
    LogitEdit& e = edits[id];
    e.row = row;
    e.id = id;
    e.repetition_penalty = params.repetition_penalty;
    return e;
  };
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || static_cast<size_t>(id) >= vocab)
      throw UsageError("sample_token: logit_bias names token " + std::to_string(id) + " of " + std::to_string(vocab));
    edit(id).bias += bias;
  }
  if (params.repetition_penalty != 1.0f)
    for (auto ids : {history.prompt, history.output})
      for (int32_t id : ids) edit(id).flags |= LogitEdit::kRepeated;
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : history.output) ++counts[id];
    for (const auto& [id, count] : counts)
      edit(id).subtract = params.presence_penalty + params.frequency_penalty * static_cast<float>(count);
  }
  check_ids(banned, vocab);
  for (int32_t id : banned) edit(id).flags |= LogitEdit::kBanned;
  std::vector<LogitEdit> out;
  out.reserve(edits.size());
  for (const auto& [id, e] : edits) out.push_back(e);
  return out;
}

std::vector<int32_t> banned_by_bad_words(std::span<const std::vector<int32_t>> bad_words_ids,
                                         std::span<const int32_t> output) {
  std::vector<int32_t> banned;
  for (size_t i = 0; i < bad_words_ids.size(); ++i) {
    const std::vector<int32_t>& word = bad_words_ids[i];
    if (word.empty()) throw UsageError("sample_token: bad_words_ids[" + std::to_string(i) + "] is empty");
    const size_t prefix = word.size() - 1;
    if (prefix <= output.size() && std::equal(word.begin(), word.end() - 1, output.end() - prefix))
      banned.push_back(word.back());
  }
  return banned;
}

bool any_token_drawable(size_t vocab, std::span<const uint8_t> allowed, const SamplingParams& params,
                        std::span<const int32_t> output) {
  const std::vector<uint8_t> keep = drawable_tokens(vocab, allowed, params, output);
  return keep.empty() || std::find_if(keep.begin(), keep.end(), [](uint8_t a) { return a != 0; }) != keep.end();
}

TokenChoice sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                         const TokenHistory& history, std::span<const uint8_t> allowed) {
  if (logits.empty()) throw UsageError("sample_token: empty logits");
  std::vector<float> x(logits.begin(), logits.end());
  const std::vector<LogitEdit> edits = logit_edits(params, history, {}, x.size());
  apply_logit_edits(x.data(), static_cast<int64_t>(x.size()), edits.data(), static_cast<int64_t>(edits.size()));
  apply_drawable(x, allowed, params, history.output);

  const int32_t id = draw(x, params, seed, history.output.size());  // temperature 0: the argmax
  if (params.logprobs) return token_logprobs(logits, id, params.top_logprobs);
  TokenChoice choice;
  choice.id = id;
  return choice;
}

TokenChoice token_logprobs(std::span<const float> logits, int32_t id, int32_t top_logprobs) {
  if (logits.empty() || id < 0 || static_cast<size_t>(id) >= logits.size())
    throw UsageError("token_logprobs: token " + std::to_string(id) + " of " + std::to_string(logits.size()) + " logits");
  RowLogprobs row = draw_row_logprobs(logits.data(), static_cast<int64_t>(logits.size()), id, top_logprobs);
  TokenChoice choice;
  choice.id = id;
  choice.logprob = row.logprob;
  choice.rank = row.rank;
  for (size_t i = 0; i < row.top_ids.size(); ++i) choice.top.emplace_back(row.top_ids[i], row.top_logprobs[i]);
  return choice;
}

}  // namespace dsv4
