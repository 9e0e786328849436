// The host sampler (sampling/sampler.h): greedy, each filter on its own, the seeded draw, the
// penalties, the raw logprobs, the allowed-token mask, allowed_token_ids and bad_words_ids, and the
// range checks of SamplingParams.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/counter_bits.h"
#include "core/error.h"
#include "sampling/sampler.h"
#include "sampling/token_draw.h"

namespace dsv4 {
namespace {

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> x;
  for (double p : probs) x.push_back(static_cast<float>(std::log(p)));
  return x;
}

std::map<int32_t, int> draw_counts(const std::vector<float>& logits, const SamplingParams& params, int draws) {
  std::map<int32_t, int> counts;
  for (int seed = 0; seed < draws; ++seed) ++counts[sample_token(logits, params, static_cast<uint64_t>(seed), {}).id];
  return counts;
}

SamplingParams sampled(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

const std::vector<double> kProbs = {0.5, 0.3, 0.15, 0.05};

TEST(Sampling, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(sample_token(std::vector<float>{0.1f, 3.0f, -2.0f}, greedy, 7, {}).id, 1);
  EXPECT_EQ(sample_token(std::vector<float>{1.0f, 5.0f, 5.0f}, greedy, 7, {}).id, 1);
}

TEST(Sampling, UnfilteredDrawsFollowTheDistribution) {
  const std::map<int32_t, int> counts = draw_counts(logits_of(kProbs), sampled(), 20000);
  for (size_t id = 0; id < kProbs.size(); ++id)
    EXPECT_NEAR(counts.at(static_cast<int32_t>(id)) / 20000.0, kProbs[id], 0.015) << "token " << id;
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
  const std::vector<float> x = logits_of(kProbs);
  // p0 = 0.5^(1/T) / sum p^(1/T): 0.832 at T = 0.3, 0.301 at T = 5 (0.5 at T = 1).
  EXPECT_NEAR(draw_counts(x, sampled(0.3f), 4000).at(0) / 4000.0, 0.832, 0.03);
  EXPECT_NEAR(draw_counts(x, sampled(5.0f), 4000).at(0) / 4000.0, 0.301, 0.03);
}

TEST(Sampling, TopKKeepsTheKMostLikely) {
  SamplingParams p = sampled();
  p.top_k = 2;
  const std::map<int32_t, int> counts = draw_counts(logits_of(kProbs), p, 4000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts.at(0) / 4000.0, 0.5 / 0.8, 0.03);
  p.top_k = 1;
  EXPECT_EQ(draw_counts(logits_of(kProbs), p, 500).size(), 1u);
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingTheMass) {
  SamplingParams p = sampled();
  p.top_p = 0.7f;  // 0.5 + 0.3 >= 0.7
  const std::map<int32_t, int> counts = draw_counts(logits_of(kProbs), p, 4000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_TRUE(counts.count(0) && counts.count(1));
  p.top_p = 0.5f;  // 0.5 alone reaches it
  EXPECT_EQ(draw_counts(logits_of(kProbs), p, 500).size(), 1u);
}

TEST(Sampling, MinPDropsTokensBelowAShareOfTheTop) {
  SamplingParams p = sampled();
  p.min_p = 0.2f;  // keeps p >= 0.1: tokens 0, 1, 2
  const std::map<int32_t, int> counts = draw_counts(logits_of(kProbs), p, 4000);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts.count(3), 0u);
}

TEST(Sampling, TheSeedAndTheOutputIndexDecideTheDraw) {
  const std::vector<float> x = logits_of({0.25, 0.25, 0.25, 0.25});
  const SamplingParams p = sampled();
  std::set<int32_t> by_index, by_seed;
  for (int i = 0; i < 8; ++i) {
    const std::vector<int32_t> out(static_cast<size_t>(i), 0);
    EXPECT_EQ(sample_token(x, p, 99, {{}, out}).id, sample_token(x, p, 99, {{}, out}).id);
    by_index.insert(sample_token(x, p, 99, {{}, out}).id);
    by_seed.insert(sample_token(x, p, static_cast<uint64_t>(i), {}).id);
  }
  EXPECT_GT(by_index.size(), 1u);
  EXPECT_GT(by_seed.size(), 1u);
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0};
  EXPECT_EQ(sample_token(std::vector<float>{2.0f, 1.9f}, p, 0, {prompt, {}}).id, 1);     // 1.0 < 1.9
  EXPECT_EQ(sample_token(std::vector<float>{-1.0f, -1.5f}, p, 0, {prompt, {}}).id, 1);   // -2 < -1.5
  EXPECT_EQ(sample_token(std::vector<float>{2.0f, 1.9f}, p, 0, {{}, {}}).id, 0);          // no history
}

TEST(Sampling, LogitBiasIsAddedBeforeEverythingButTheLogprobs) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = true;
  const std::vector<float> x = {1.0f, 0.5f, 0.0f};
  p.logit_bias = {{0, -0.6f}};  // 0.4 < 0.5
  const TokenChoice biased = sample_token(x, p, 0, {});
  EXPECT_EQ(biased.id, 1);
  p.logit_bias.clear();
  const TokenChoice plain = sample_token(x, p, 0, {});
  EXPECT_EQ(plain.id, 0);
  const double z = std::exp(1.0) + std::exp(0.5) + std::exp(0.0);
  EXPECT_FLOAT_EQ(biased.logprob, static_cast<float>(0.5 - std::log(z))) << "the raw distribution's, unbiased";
  // A bias of 100 makes the least likely token the draw at any temperature; -100 bans one.
  p.temperature = 1.0f;
  p.logit_bias = {{2, 100.0f}};
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(sample_token(x, p, seed, {}).id, 2);
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}};
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(sample_token(x, p, seed, {}).id, 2);
  p.logit_bias = {{3, 1.0f}};
  EXPECT_THROW(sample_token(x, p, 0, {}), UsageError);  // beyond the logits
}

TEST(Sampling, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> x = {1.0f, 0.5f};
  const std::vector<int32_t> twice = {0, 0};
  p.frequency_penalty = 0.3f;  // 1 - 0.6 < 0.5
  EXPECT_EQ(sample_token(x, p, 0, {{}, twice}).id, 1);
  EXPECT_EQ(sample_token(x, p, 0, {twice, {}}).id, 0);  // prompt tokens are not penalised
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.6f;  // 1 - 0.6 < 0.5
  EXPECT_EQ(sample_token(x, p, 0, {{}, twice}).id, 1);
  p.presence_penalty = 0.4f;  // once, whatever the count: 0.6 > 0.5
  EXPECT_EQ(sample_token(x, p, 0, {{}, twice}).id, 0);
}

TEST(Sampling, LogprobsAreTheRawDistributionsAndSumToOne) {
  const std::vector<float> x = {1.0f, 3.0f, -0.5f, 2.0f, 0.0f};
  SamplingParams p = sampled(0.7f);
  p.logprobs = true;
  p.top_logprobs = 5;
  p.frequency_penalty = 1.0f;  // changes the draw, not the logprobs
  const std::vector<int32_t> out = {1};
  const TokenChoice c = sample_token(x, p, 3, {{}, out});
  ASSERT_EQ(c.top.size(), 5u);
  double mass = 0;
  for (size_t i = 0; i < c.top.size(); ++i) {
    mass += std::exp(static_cast<double>(c.top[i].second));
    if (i > 0) {
      EXPECT_GE(c.top[i - 1].second, c.top[i].second);
    }
    if (c.top[i].first == c.id) {
      EXPECT_EQ(c.top[i].second, c.logprob);
    }
  }
  EXPECT_NEAR(mass, 1.0, 1e-6);
  EXPECT_EQ(c.top[0].first, 1);
  EXPECT_NEAR(c.top[0].second - c.top[1].second, 1.0f, 1e-6);  // logit 3 vs 2
  p.top_logprobs = 2;
  EXPECT_EQ(sample_token(x, p, 3, {}).top.size(), 2u);
}

// A token's rank is 1 + the tokens of a larger logit (vLLM's): tied tokens share one.
TEST(Sampling, TokenLogprobsRankCountsTheMoreLikelyTokens) {
  const std::vector<float> x = {1.0f, 3.0f, -0.5f, 2.0f, 3.0f};
  EXPECT_EQ(token_logprobs(x, 1, 0).rank, 1);
  EXPECT_EQ(token_logprobs(x, 4, 0).rank, 1);
  EXPECT_EQ(token_logprobs(x, 3, 0).rank, 3);
  EXPECT_EQ(token_logprobs(x, 2, 0).rank, 5);
}

TEST(Sampling, MaskedTokensAreNeverDrawnAndTheRestKeepTheirShares) {
  const std::vector<float> x = logits_of(kProbs);
  const std::vector<uint8_t> allowed = {0, 1, 0, 1};  // 0.3 and 0.05: 6/7 and 1/7 of the mass
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(sample_token(x, greedy, 0, {}, allowed).id, 1);
  std::map<int32_t, int> counts;
  for (int seed = 0; seed < 7000; ++seed) ++counts[sample_token(x, sampled(), static_cast<uint64_t>(seed), {}, allowed).id];
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[1] / 7000.0, 6.0 / 7.0, 0.015);
  // The filters see the allowed tokens only: top-k 1 keeps token 1, min-p is relative to it.
  SamplingParams p = sampled();
  p.top_k = 1;
  EXPECT_EQ(draw_counts(x, p, 200).count(0), 1u);  // unmasked: token 0
  for (int seed = 0; seed < 200; ++seed) EXPECT_EQ(sample_token(x, p, static_cast<uint64_t>(seed), {}, allowed).id, 1);
  p.top_k = 0;
  p.min_p = 0.2f;  // 0.05 < 0.2 * 0.3
  for (int seed = 0; seed < 200; ++seed) EXPECT_EQ(sample_token(x, p, static_cast<uint64_t>(seed), {}, allowed).id, 1);
  // A lone allowed token far below the others still wins at a low temperature.
  const std::vector<float> far = {50.0f, -50.0f, 40.0f};
  for (int seed = 0; seed < 50; ++seed)
    EXPECT_EQ(sample_token(far, sampled(0.05f), static_cast<uint64_t>(seed), {}, std::vector<uint8_t>{0, 1, 0}).id, 1);
}

TEST(Sampling, MaskedLogprobsStayTheRawOnes) {
  const std::vector<float> x = {1.0f, 3.0f, -0.5f, 2.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = true;
  p.top_logprobs = 2;
  const TokenChoice masked = sample_token(x, p, 0, {}, std::vector<uint8_t>{1, 0, 1, 0});
  const TokenChoice raw = sample_token(x, p, 0, {});
  EXPECT_EQ(masked.id, 0);
  EXPECT_EQ(masked.top, raw.top);  // tokens 1 and 3, masked or not
  EXPECT_EQ(raw.id, 1);
  EXPECT_NEAR(masked.logprob, raw.logprob - 2.0f, 1e-6);  // logit 1 vs 3, in the raw distribution
}

TEST(Sampling, AMaskOfAnotherSizeOrAllowingNothingIsRefused) {
  const std::vector<float> x = {1.0f, 2.0f};
  EXPECT_THROW(sample_token(x, sampled(), 0, {}, std::vector<uint8_t>{1}), UsageError);
  EXPECT_THROW(sample_token(x, sampled(), 0, {}, std::vector<uint8_t>{0, 0}), UsageError);
  EXPECT_NO_THROW(sample_token(x, sampled(), 0, {}, std::vector<uint8_t>{0, 1}));
}

// vLLM's allowed_token_ids: only the listed tokens are drawn, in their shares of the listed mass,
// greedy takes the best listed one, the logprobs stay raw, and beside a mask only tokens both
// allow are drawn (none: refused).
TEST(Sampling, AllowedTokenIdsRestrictTheDrawAndMeetAMask) {
  const std::vector<float> x = logits_of(kProbs);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.allowed_token_ids = {3, 1};  // 0.3 and 0.05: 6/7 and 1/7 of the mass
  EXPECT_EQ(sample_token(x, greedy, 0, {}).id, 1);
  SamplingParams p = sampled();
  p.allowed_token_ids = {3, 1, 3};
  std::map<int32_t, int> counts = draw_counts(x, p, 7000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[1] / 7000.0, 6.0 / 7.0, 0.015);

  p.allowed_token_ids = {2, 3};
  const std::vector<uint8_t> mask = {1, 0, 0, 1};
  for (int seed = 0; seed < 200; ++seed) EXPECT_EQ(sample_token(x, p, static_cast<uint64_t>(seed), {}, mask).id, 3);
  EXPECT_THROW(sample_token(x, p, 0, {}, std::vector<uint8_t>{1, 1, 0, 0}), UsageError);
  p.allowed_token_ids = {4};
  EXPECT_THROW(sample_token(x, p, 0, {}), UsageError);

  greedy.logprobs = true;
  greedy.allowed_token_ids = {2};
  const TokenChoice restricted = sample_token(x, greedy, 0, {});
  EXPECT_EQ(restricted.id, 2);
  EXPECT_NEAR(restricted.logprob, std::log(0.15), 1e-6);  // the raw distribution's
}

// vLLM's bad_words: a one-token sequence is never drawn at temperature 1, and greedy takes the
// next best token; after a penalty (which could lift it back) the ban still holds.
TEST(Sampling, AOneTokenBadWordIsNeverDrawn) {
  const std::vector<float> x = logits_of(kProbs);
  SamplingParams p = sampled();
  p.bad_words_ids = {{0}};
  const std::map<int32_t, int> counts = draw_counts(x, p, 5000);
  EXPECT_EQ(counts.count(0), 0u);
  EXPECT_NEAR(counts.at(1) / 5000.0, 0.6, 0.03);  // 0.3 of the 0.5 left
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.bad_words_ids = {{0}};
  EXPECT_EQ(sample_token(x, greedy, 0, {}).id, 1);
  greedy.logit_bias = {{0, 100.0f}};
  EXPECT_EQ(sample_token(x, greedy, 0, {}).id, 1);
  greedy.bad_words_ids = {{0}, {1}};
  EXPECT_EQ(sample_token(x, greedy, 0, {}).id, 2);
}

// A two-token bad word bans its last token only right after its first was generated; the prompt
// does not count, as in vLLM.
TEST(Sampling, ATwoTokenBadWordBansItsLastTokenAfterItsFirst) {
  const std::vector<float> x = logits_of(kProbs);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.bad_words_ids = {{2, 0}};
  const std::vector<int32_t> after_first = {1, 2}, elsewhere = {2, 1}, prompt = {2};
  EXPECT_EQ(sample_token(x, greedy, 0, {{}, after_first}).id, 1);
  EXPECT_EQ(sample_token(x, greedy, 0, {{}, elsewhere}).id, 0);
  EXPECT_EQ(sample_token(x, greedy, 0, {}).id, 0);
  EXPECT_EQ(sample_token(x, greedy, 0, {prompt, {}}).id, 0);
  SamplingParams p = sampled();
  p.bad_words_ids = {{2, 0}};
  for (int seed = 0; seed < 500; ++seed)
    EXPECT_NE(sample_token(x, p, static_cast<uint64_t>(seed), {{}, after_first}).id, 0);
  EXPECT_EQ(banned_by_bad_words(p.bad_words_ids, after_first), std::vector<int32_t>{0});
  EXPECT_TRUE(banned_by_bad_words(p.bad_words_ids, elsewhere).empty());
}

// The ban meets a mask and allowed_token_ids; a ban that leaves no token is refused, and
// any_token_drawable says so beforehand (the engine's check).
TEST(Sampling, ABadWordBanThatLeavesNoTokenIsRefused) {
  const std::vector<float> x = logits_of(kProbs);
  SamplingParams p = sampled();
  p.allowed_token_ids = {1, 3};
  p.bad_words_ids = {{1}};
  for (int seed = 0; seed < 100; ++seed) EXPECT_EQ(sample_token(x, p, static_cast<uint64_t>(seed), {}).id, 3);
  EXPECT_TRUE(any_token_drawable(x.size(), {}, p, {}));
  p.bad_words_ids = {{1}, {3}};
  EXPECT_FALSE(any_token_drawable(x.size(), {}, p, {}));
  EXPECT_THROW(sample_token(x, p, 0, {}), UsageError);
  SamplingParams masked = sampled();
  masked.bad_words_ids = {{2}};
  const std::vector<uint8_t> only_2 = {0, 0, 1, 0};
  EXPECT_FALSE(any_token_drawable(x.size(), only_2, masked, {}));
  EXPECT_THROW(sample_token(x, masked, 0, {}, only_2), UsageError);
  masked.bad_words_ids = {{4}};  // outside the logits
  EXPECT_THROW(sample_token(x, masked, 0, {}), UsageError);
}

// Exact products for the reference below (a GCC and Clang extension).
__extension__ using U128 = unsigned __int128;

// token_draw.h's draw written the slow way: every filter sorts all the kept tokens. sample_token
// selects and sorts only what it needs; the two must pick the same token.
int32_t draw_sorting_everything(const std::vector<float>& x, const SamplingParams& params, uint64_t seed,
                                uint64_t index) {
  float top = -std::numeric_limits<float>::infinity();
  for (float v : x) top = std::max(top, v);
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  std::vector<uint64_t> w(x.size());
  std::vector<int32_t> kept;
  for (size_t i = 0; i < x.size(); ++i) {
    w[i] = draw_weight(x[i], top, inv_t);
    if (w[i] > 0 && static_cast<double>(w[i]) >= std::ceil(static_cast<double>(params.min_p) * 0x1.0p44))
      kept.push_back(static_cast<int32_t>(i));
  }
  auto in_order = [&x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  auto total_of = [&w](const std::vector<int32_t>& ids) {
    uint64_t t = 0;
    for (int32_t id : ids) t += w[id];
    return t;
  };
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < kept.size()) {
    std::sort(kept.begin(), kept.end(), in_order);
    kept.resize(static_cast<size_t>(params.top_k));
    std::sort(kept.begin(), kept.end());
  }
  if (params.top_p < 1.0f) {
    // ceil(top_p * total), exactly: top_p = scaled / 2^40 for the test's values
    const auto scaled = static_cast<uint64_t>(static_cast<double>(params.top_p) * 0x1.0p40);
    const auto need = static_cast<uint64_t>((U128{total_of(kept)} * scaled + ((U128{1} << 40) - 1)) >> 40);
    std::sort(kept.begin(), kept.end(), in_order);
    uint64_t mass = 0;
    size_t n = 0;
    while (n < kept.size() && mass < need) mass += w[kept[n++]];
    kept.resize(n);
    std::sort(kept.begin(), kept.end());
  }
  const uint64_t total = total_of(kept);
  const auto target = static_cast<uint64_t>((U128{counter_bits(splitmix64_mix(seed), index) >> 11} * total) >> 53);
  uint64_t mass = 0;
  for (int32_t id : kept)
    if ((mass += w[id]) > target) return id;
  return -1;
}

TEST(Sampling, FiltersPickWhatSortingTheWholeVocabularyPicks) {
  // Vocabularies whose top-p sets hold from one token to thousands (so the sampler sorts in one
  // round or several), with ties (logits on a coarse grid) and without, some with every third
  // token masked out (-inf); temperature 0.004 leaves most weights 0.
  std::mt19937 rng(7);
  const int vocab = 6000;
  int compared = 0;
  for (const double spread : {0.3, 2.0, 8.0})
    for (const int kind : {0, 1, 2}) {  // no ties; ties; ties with a mask
      const bool ties = kind > 0;
      std::normal_distribution<float> normal(0.0f, static_cast<float>(spread));
      std::vector<float> x(vocab);
      for (float& v : x) v = ties ? std::round(normal(rng) * 2.0f) / 2.0f : normal(rng);
      if (kind == 2)
        for (size_t i = 0; i < x.size(); i += 3) x[i] = -std::numeric_limits<float>::infinity();
      for (const float temperature : {0.004f, 0.5f, 1.0f, 1.7f})
        for (const float top_p : {0.05f, 0.6f, 0.95f, 0.999f, 1.0f})
          for (const int top_k : {0, 1, 40, 5000})
            for (const float min_p : {0.0f, 0.02f}) {
              SamplingParams p = sampled(temperature);
              p.top_p = top_p;
              p.top_k = top_k;
              p.min_p = min_p;
              for (uint64_t seed = 0; seed < 3; ++seed) {
                const std::vector<int32_t> out(static_cast<size_t>(seed), 0);
                ASSERT_EQ(sample_token(x, p, 11 + seed, {{}, out}).id, draw_sorting_everything(x, p, 11 + seed, seed))
                    << "spread " << spread << " kind " << kind << " T " << temperature << " top_p " << top_p
                    << " top_k " << top_k << " min_p " << min_p << " seed " << seed;
                ++compared;
              }
            }
    }
  EXPECT_EQ(compared, 3 * 3 * 4 * 5 * 4 * 2 * 3);
}

// logit_edits: one edit per token touched, ids ascending, in the row asked for: logit_bias
// entries of one id added up, the repetition flag on prompt and output tokens, presence +
// frequency * count on output tokens, bans; ids outside the vocabulary refused.
TEST(Sampling, LogitEditsListEachTouchedTokenOnce) {
  SamplingParams p = sampled();
  p.logit_bias = {{9, 1.5f}, {2, -1.0f}, {9, 0.25f}};
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int32_t> prompt = {4, 4, 7}, output = {7, 3, 7};
  const std::vector<int32_t> banned = {11, 3};
  const std::vector<LogitEdit> edits = logit_edits(p, {prompt, output}, banned, 12, 5);
  std::vector<int32_t> ids;
  for (const LogitEdit& e : edits) {
    ids.push_back(e.id);
    EXPECT_EQ(e.row, 5);
    EXPECT_EQ(e.repetition_penalty, 1.2f);
  }
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3, 4, 7, 9, 11}));
  auto of = [&](int32_t id) { return *std::find_if(edits.begin(), edits.end(), [&](const LogitEdit& e) { return e.id == id; }); };
  EXPECT_EQ(of(9).bias, 1.75f);
  EXPECT_EQ(of(2).bias, -1.0f);
  EXPECT_EQ(of(4).flags, LogitEdit::kRepeated);
  EXPECT_EQ(of(4).subtract, 0.0f);  // a prompt token: no presence or frequency penalty
  EXPECT_EQ(of(7).subtract, 0.5f + 0.25f * 2.0f);
  EXPECT_EQ(of(3).flags, LogitEdit::kRepeated | LogitEdit::kBanned);
  EXPECT_EQ(of(11).flags, LogitEdit::kBanned);
  EXPECT_EQ(of(9).flags, 0u);
  EXPECT_THROW(logit_edits(p, {prompt, output}, std::vector<int32_t>{12}, 12), UsageError);
  EXPECT_THROW(logit_edits(p, {prompt, std::vector<int32_t>{12}}, {}, 12), UsageError);
}

// draw_weight is floor(2^44 e^y) up to its series' error: within one unit (and a relative 1e-15) of
// std::exp's, 2^44 at y = 0, 0 below -31 and for NaN, and never rising as y falls on a fine grid.
TEST(Sampling, DrawWeightsAreTheScaledExponential) {
  EXPECT_EQ(draw_weight_of_exponent(0.0), uint64_t{1} << 44);
  EXPECT_EQ(draw_weight_of_exponent(-0.0), uint64_t{1} << 44);
  EXPECT_EQ(draw_weight_of_exponent(-31.5), 0u);
  EXPECT_EQ(draw_weight_of_exponent(std::numeric_limits<double>::quiet_NaN()), 0u);
  EXPECT_EQ(draw_weight_of_exponent(-std::numeric_limits<double>::infinity()), 0u);
  uint64_t previous = draw_weight_of_exponent(0.0);
  double worst = 0;
  for (int i = 1; i <= 310000; ++i) {
    const double y = -i * 1e-4;
    const uint64_t w = draw_weight_of_exponent(y);
    const double exact = std::ldexp(std::exp(y), 44);
    worst = std::max(worst, std::abs(static_cast<double>(w) - exact) - 1e-15 * exact);
    ASSERT_LE(w, previous) << "y " << y;
    previous = w;
  }
  EXPECT_LE(worst, 1.0);
}

// The logprobs' exact sum and draw_log give log_softmax to double precision: against a long double
// computation, rows of spread logits and a row where one token holds all but ~1e-8 of the mass
// (its logprob is then tiny and must keep its digits); the rank counts larger logits and the top
// list is by logit, ties by id, without NaN.
TEST(Sampling, RowLogprobsAreTheLogSoftmax) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> x(5000);
    for (float& v : x) v = kind == 2 ? -10.0f : normal(rng);
    if (kind == 2) x[17] = 30.0f;
    if (kind == 1) x[3] = std::numeric_limits<float>::quiet_NaN();
    // log(sum) = log1p(the sum of every term but the top's), which keeps a small tail's digits
    size_t argmax = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (!std::isnan(x[i]) && (std::isnan(x[argmax]) || x[i] > x[argmax])) argmax = i;
    const auto top = static_cast<long double>(x[argmax]);
    long double tail = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (i != argmax && !std::isnan(x[i])) tail += std::exp(static_cast<long double>(x[i]) - top);
    for (const int32_t id : {0, 17, 4999}) {
      const RowLogprobs row = draw_row_logprobs(x.data(), static_cast<int64_t>(x.size()), id, 5);
      const auto want = static_cast<double>(static_cast<long double>(x[id]) - top - std::log1p(tail));
      EXPECT_NEAR(row.logprob, want, std::abs(want) * 0x1.0p-23) << "kind " << kind << " id " << id;  // a float ulp
      EXPECT_EQ(row.rank, 1 + std::count_if(x.begin(), x.end(), [&](float v) { return v > x[id]; }));
    }
    const RowLogprobs row = draw_row_logprobs(x.data(), static_cast<int64_t>(x.size()), 0, 5);
    ASSERT_EQ(row.top_ids.size(), 5u);
    for (size_t i = 1; i < 5; ++i) {
      EXPECT_GE(x[row.top_ids[i - 1]], x[row.top_ids[i]]);
      if (x[row.top_ids[i - 1]] == x[row.top_ids[i]]) {
        EXPECT_LT(row.top_ids[i - 1], row.top_ids[i]);
      }
    }
    EXPECT_EQ(static_cast<float>(*std::max_element(x.begin(), x.end(), [](float a, float b) {
                return std::isnan(a) || (!std::isnan(b) && a < b);
              })),
              x[row.top_ids[0]]);
  }
}

// The integer helpers against exact 128-bit arithmetic: floor(a b / 2^s), top-p's ceil(top_p
// total) and the draw's target below its total.
TEST(Sampling, DrawIntegerArithmeticIsExact) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t total = rng() >> (1 + rng() % 40), a = rng() >> 11;
    const int s = 53;
    ASSERT_EQ(draw_mul_shift(a, total, s), static_cast<uint64_t>((U128{a} * total) >> s));
    const float top_p = std::uniform_real_distribution<float>(1e-4f, 1.0f)(rng);
    const auto scaled = static_cast<uint64_t>(static_cast<double>(top_p) * 0x1.0p40);
    ASSERT_EQ(top_p_need(top_p, total), static_cast<uint64_t>((U128{total} * scaled + ((U128{1} << 40) - 1)) >> 40));
    if (total > 0) {
      ASSERT_LT(draw_target(rng(), rng(), total), total);
    }
  }
  EXPECT_EQ(top_p_need(1.0f, 12345), 12345u);
  EXPECT_EQ(top_p_need(0.5f, 3), 2u);
}

TEST(Sampling, LogitsWithoutAFiniteMaximumAreRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_THROW(sample_token(std::vector<float>{nan, nan}, sampled(), 0, {}), UsageError);
  EXPECT_THROW(sample_token(std::vector<float>{inf, 1.0f}, sampled(), 0, {}), UsageError);
}

TEST(Sampling, ParamsOutOfRangeAreRefusedByName) {
  auto refused = [](auto change, const char* field) {
    SamplingParams p;
    change(p);
    try {
      p.validate();
      ADD_FAILURE() << field << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused([](SamplingParams& p) { p.temperature = -1; }, "temperature");
  refused([](SamplingParams& p) { p.top_p = 0; }, "top_p");
  refused([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  refused([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  refused([](SamplingParams& p) { p.presence_penalty = 3; }, "presence_penalty");
  refused([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
  refused([](SamplingParams& p) { p.top_logprobs = 3; }, "top_logprobs");  // without logprobs
  refused([](SamplingParams& p) { p.logit_bias = {{1, 101.0f}}; }, "logit_bias value");
  refused([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias token id");
  refused([](SamplingParams& p) { p.allowed_token_ids = {2, -1}; }, "allowed_token_ids token id");
  refused([](SamplingParams& p) { p.bad_words_ids = {{2}, {}}; }, "bad_words_ids[1]");
  refused([](SamplingParams& p) { p.bad_words_ids = {{2, -3}}; }, "bad_words_ids token id");
  SamplingParams ok;
  EXPECT_NO_THROW(ok.validate());
  EXPECT_THROW(sample_token(std::vector<float>{1.0f}, ok, 0, {std::vector<int32_t>{5}, {}}), UsageError);
}

}  // namespace
}  // namespace dsv4
