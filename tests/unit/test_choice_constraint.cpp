// The guided_choice constraint (sampling/choice_prefix.h) on a small made-up vocabulary: which
// tokens may follow, when the end of sequence may, and which lists of choices are refused.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampling/choice_prefix.h"
#include "token_mask_test_util.h"

namespace dsv4 {
namespace {

using Ids = std::vector<int32_t>;

// Id 0 is the end of sequence (no bytes, as the engine gives special tokens).
const std::vector<std::string> kVocabulary = {"", "y", "ye", "yes", "s", " ", " sir", "n", "no", "o", "x", "yes sir!"};
constexpr int32_t kEos = 0;

Ids allowed_ids(const ChoicePrefix& prefix, const JsonTokenMask& mask, bool eos_allowed = true) {
  return testing::allowed_ids(prefix, mask, kEos, eos_allowed);
}

ChoicePrefix after(const std::vector<std::string>& choices, const std::string& text) {
  ChoicePrefix prefix(std::make_shared<const std::vector<std::string>>(choices));
  prefix.advance(text);
  return prefix;
}

TEST(ChoicePrefix, AllowsTheTokensThatKeepTheTextTheStartOfAChoice) {
  const JsonTokenMask mask(kVocabulary);
  const std::vector<std::string> choices = {"yes", "yes sir", "no"};
  EXPECT_EQ(allowed_ids(after(choices, ""), mask), (Ids{1, 2, 3, 7, 8}));
  EXPECT_EQ(allowed_ids(after(choices, "ye"), mask), (Ids{4}));
  // "yes" is a choice and begins "yes sir": it may end (end of sequence) or go on.
  const ChoicePrefix yes = after(choices, "yes");
  EXPECT_TRUE(yes.is_choice());
  EXPECT_TRUE(yes.can_continue());
  EXPECT_EQ(allowed_ids(yes, mask), (Ids{kEos, 5, 6}));
  EXPECT_EQ(allowed_ids(yes, mask, /*eos_allowed=*/false), (Ids{5, 6}));
  // "no" ends the request: nothing continues it, only the end of sequence is allowed.
  const ChoicePrefix no = after(choices, "no");
  EXPECT_TRUE(no.is_choice());
  EXPECT_FALSE(no.can_continue());
  EXPECT_EQ(allowed_ids(no, mask), (Ids{kEos}));
  // A token longer than every choice it begins ("yes sir!") is never allowed.
  EXPECT_EQ(allowed_ids(after(choices, "yes sir"), mask), (Ids{kEos}));
  const ChoicePrefix partial = after(choices, "y");
  EXPECT_FALSE(partial.is_choice());
  EXPECT_TRUE(partial.can_continue());
}

// The sorted-rest lookup against trying every token against every choice, on random vocabularies
// and choices over a small alphabet (so choices share prefixes and tokens overlap them).
TEST(ChoicePrefix, EqualsTryingEveryTokenAgainstEveryChoice) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab c\xC3\xA9";
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::string> vocabulary(400);
    for (size_t id = 1; id < vocabulary.size(); ++id)  // id 0 stays empty: the end of sequence
      for (size_t n = 1 + rng() % 3; n > 0; --n) vocabulary[id] += alphabet[rng() % alphabet.size()];
    auto choices = std::make_shared<std::vector<std::string>>();
    for (size_t n = 1 + rng() % 12; n > 0; --n) {
      std::string c;
      for (size_t k = 1 + rng() % 6; k > 0; --k) c += alphabet[rng() % alphabet.size()];
      choices->push_back(c);
    }
    const JsonTokenMask mask(vocabulary);
    const std::string& target = (*choices)[rng() % choices->size()];
    for (size_t len = 0; len <= target.size(); ++len) {
      ChoicePrefix prefix(choices);
      prefix.advance(target.substr(0, len));
      std::vector<uint8_t> allowed;
      const size_t count = prefix.allowed_tokens(mask, kEos, true, allowed);
      size_t want_count = 0;
      for (size_t id = 0; id < vocabulary.size(); ++id) {
        const std::string next = target.substr(0, len) + vocabulary[id];
        bool want = false;
        for (const std::string& c : *choices) want = want || (!vocabulary[id].empty() && c.starts_with(next));
        if (id == static_cast<size_t>(kEos)) want = prefix.is_choice();
        ASSERT_EQ(allowed[id] != 0, want) << "trial " << trial << ", text \"" << target.substr(0, len) << "\", token "
                                          << id << " \"" << vocabulary[id] << "\"";
        want_count += want;
      }
      EXPECT_EQ(count, want_count);
    }
  }
}

TEST(ChoicePrefix, RefusesAnEmptyListOrAnEmptyChoice) {
  EXPECT_THROW(ChoicePrefix::validate({}), UsageError);
  try {
    ChoicePrefix::validate({"a", ""});
    FAIL() << "an empty choice was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("choice 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ChoicePrefix(nullptr), UsageError);
  EXPECT_NO_THROW(ChoicePrefix::validate({"a", "ab"}));
}

}  // namespace
}  // namespace dsv4
