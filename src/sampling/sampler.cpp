// sample_token: the penalties, the filters and the seeded draw of sampler.h, in double precision
// where probabilities are summed.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/counter_bits.h"
#include "core/error.h"

namespace dsv4 {

namespace {

void check_ids(std::span<const int32_t> ids, size_t vocab) {
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= vocab)
      throw UsageError("sample_token: token id " + std::to_string(id) + " outside the vocabulary of " +
                       std::to_string(vocab));
}

void apply_penalties(std::vector<float>& x, const SamplingParams& params, const TokenHistory& history) {
  if (params.repetition_penalty != 1.0f) {
    std::vector<bool> seen(x.size(), false);
    for (auto ids : {history.prompt, history.output})
      for (int32_t id : ids) seen[static_cast<size_t>(id)] = true;
    for (size_t i = 0; i < x.size(); ++i)
      if (seen[i]) x[i] = x[i] > 0 ? x[i] / params.repetition_penalty : x[i] * params.repetition_penalty;
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : history.output) ++counts[id];
    for (const auto& [id, count] : counts)
      x[static_cast<size_t>(id)] -= params.presence_penalty + params.frequency_penalty * static_cast<float>(count);
  }
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

int32_t argmax(const std::vector<float>& x) {
  size_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

// A kept token with its probability, side by side so that selecting and sorting them reads
// contiguous memory.
struct Kept {
  double p;
  int32_t id;
};

double probability(float x, float top, double inv_t) { return std::exp((static_cast<double>(x) - top) * inv_t); }

double total_of(const std::vector<Kept>& ks) {
  double total = 0;
  for (const Kept& k : ks) total += k.p;
  return total;
}

// The largest top_k whose k-th largest logit top_k_by_logit finds with a heap of k (a larger k
// selects over a copy of the logits instead).
constexpr size_t kTopKHeapMax = 1024;

// draw's kept tokens (ids ascending) after min-p and top-k, computed from the top_k largest logits
// alone: a probability rises with its logit, so the k most likely tokens (ties by id) are the k
// largest logits (ties by id), and only their k probabilities need an exp, not the vocabulary's.
// Where rounding makes two different logits' probabilities equal at the cut (deep in exp's
// subnormal range), the two orders could differ: then, and for NaN logits, nothing is returned and
// draw takes its full pass. Both give the same set, probabilities and order, so the same draw.
std::optional<std::vector<Kept>> top_k_by_logit(const std::vector<float>& x, const SamplingParams& params, float top,
                                                double inv_t) {
  const auto k = static_cast<size_t>(params.top_k);
  if (params.top_k <= 0 || k >= x.size() || !std::isfinite(top)) return std::nullopt;
  if (std::any_of(x.begin(), x.end(), [](float v) { return std::isnan(v); })) return std::nullopt;
  // The k-th largest logit: for the usual small k a min-heap of the k largest so far (one
  // comparison for most logits), else a selection over a copy.
  float kth = 0;
  if (k <= kTopKHeapMax) {
    std::vector<float> heap(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(k));
    std::make_heap(heap.begin(), heap.end(), std::greater<float>());
    for (size_t i = k; i < x.size(); ++i)
      if (x[i] > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = x[i];
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      }
    kth = heap.front();
  } else {
    std::vector<float> copy(x);
    std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(k - 1), copy.end(), std::greater<float>());
    kth = copy[k - 1];
  }
  // The k largest logits (those above kth, then kth's ties by ascending id), and the largest below.
  std::vector<int32_t> above, at_kth;
  float below = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > kth) above.push_back(static_cast<int32_t>(i));
    else if (x[i] == kth) at_kth.push_back(static_cast<int32_t>(i));
    else below = std::max(below, x[i]);
  }
  at_kth.resize(k - above.size());
  // The order by probability is the order by logit where the cut's probability is strictly
  // between those of the logits on either side of it.
  const double p_kth = probability(kth, top, inv_t);
  if (!(p_kth > probability(below, top, inv_t))) return std::nullopt;
  // Filled by index: a second push_back of Kept in this file made GCC 12 call the full pass's out
  // of line (0.4 ms a row of 129,280 on the development machine).
  std::vector<Kept> kept(k);
  for (size_t i = 0; i < above.size(); ++i) {
    const double p = probability(x[static_cast<size_t>(above[i])], top, inv_t);
    if (!(p > p_kth)) return std::nullopt;
    kept[i] = {p, above[i]};
  }
  for (size_t i = 0; i < at_kth.size(); ++i) kept[above.size() + i] = {p_kth, at_kth[i]};
  // min-p (and p > 0) keep an upper part of that order: the k most likely of the tokens they keep
  // are the ones of these k that they keep.
  std::erase_if(kept, [&](const Kept& t) { return !(t.p > 0 && t.p >= static_cast<double>(params.min_p)); });
  std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.id < b.id; });
  return kept;
}

// Draws from the temperature-scaled, filtered distribution of the penalised logits `x`. Tokens
// of probability 0 (masked out, or too unlikely for a double) are never kept, so never drawn.
// One pass computes the probabilities, the kept ids (ascending) and their total; top-k selects
// in linear time (from the logits alone where top_k_by_logit can) and top-p sorts only the most
// likely tokens it needs (a strict order, so the same prefix as a sort of all of them), so a draw
// costs O(V) rather than a sort of the vocabulary.
int32_t draw(const std::vector<float>& x, const SamplingParams& params, uint64_t seed, uint64_t draw_index) {
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  const float top = *std::max_element(x.begin(), x.end());
  std::vector<Kept> kept;
  double kept_total = 0;  // over kept, ids ascending
  if (std::optional<std::vector<Kept>> by_logit = top_k_by_logit(x, params, top, inv_t)) {
    kept = std::move(*by_logit);
    kept_total = total_of(kept);
  } else {
    kept.reserve(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double p = probability(x[i], top, inv_t);  // max 1
      if (p > 0 && p >= static_cast<double>(params.min_p)) {
        kept.push_back({p, static_cast<int32_t>(i)});
        kept_total += p;
      }
    }
  }
  if (kept.empty())
    throw UsageError("sample_token: no token has a probability (the logits' largest value is " + std::to_string(top) +
                     ")");
  auto more_likely = [](const Kept& a, const Kept& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); };
  auto at = [&kept](size_t i) { return kept.begin() + static_cast<std::ptrdiff_t>(i); };
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept.size()) {
    std::nth_element(kept.begin(), at(static_cast<size_t>(params.top_k) - 1), kept.end(), more_likely);
    kept.resize(static_cast<size_t>(params.top_k));
    std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.id < b.id; });
    kept_total = total_of(kept);
  }
  if (params.top_p < 1.0f) {
    // The smallest prefix of kept in likelihood order whose mass reaches top_p of kept_total:
    // kept[0, sorted) is that order's start; each round sorts the next most likely tokens.
    const double target = static_cast<double>(params.top_p) * kept_total;
    constexpr size_t kFirstRound = 64;
    double mass = 0;
    size_t n = 0, sorted = 0;
    for (size_t want = std::min(kFirstRound, kept.size());; want = std::min(4 * want, kept.size())) {
      if (want < kept.size()) std::nth_element(at(sorted), at(want), kept.end(), more_likely);
      std::sort(at(sorted), at(want), more_likely);
      sorted = want;
      while (n < sorted && mass < target) mass += kept[n++].p;
      if (mass >= target || sorted == kept.size()) break;
    }
    kept.resize(std::max<size_t>(n, 1));
    kept_total = total_of(kept);
  }

  const double u = static_cast<double>(counter_bits(splitmix64_mix(seed), draw_index) >> 11) * 0x1.0p-53;  // [0, 1)
  const double target = u * kept_total;
  double mass = 0;
  for (const Kept& k : kept) {
    mass += k.p;
    if (mass > target) return k.id;
  }
  return kept.back().id;
}

}  // namespace

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
  check_ids(history.prompt, logits.size());
  check_ids(history.output, logits.size());
  std::vector<float> x(logits.begin(), logits.end());
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || static_cast<size_t>(id) >= x.size())
      throw UsageError("sample_token: logit_bias names token " + std::to_string(id) + " of " +
                       std::to_string(x.size()));
    x[static_cast<size_t>(id)] += bias;
  }
  apply_penalties(x, params, history);
  apply_drawable(x, allowed, params, history.output);

  const int32_t id = params.temperature == 0.0f ? argmax(x) : draw(x, params, seed, history.output.size());
  if (params.logprobs) return token_logprobs(logits, id, params.top_logprobs);
  TokenChoice choice;
  choice.id = id;
  return choice;
}

TokenChoice token_logprobs(std::span<const float> logits, int32_t id, int32_t top_logprobs) {
  if (logits.empty() || id < 0 || static_cast<size_t>(id) >= logits.size())
    throw UsageError("token_logprobs: token " + std::to_string(id) + " of " + std::to_string(logits.size()) + " logits");
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - top);
  const double log_z = static_cast<double>(top) + std::log(sum);
  auto logprob = [&](int32_t i) { return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(i)]) - log_z); };
  TokenChoice choice;
  choice.id = id;
  choice.logprob = logprob(id);
  choice.rank = 1 + static_cast<int32_t>(std::count_if(logits.begin(), logits.end(),
                                                        [&](float v) { return v > logits[static_cast<size_t>(id)]; }));
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const size_t n = std::min(ids.size(), static_cast<size_t>(std::max(0, top_logprobs)));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < n; ++i) choice.top.emplace_back(ids[i], logprob(ids[i]));
  return choice;
}

}  // namespace dsv4
