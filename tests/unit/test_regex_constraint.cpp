// The guided_regex constraint: the pattern syntax RegexNfa takes (each construct's whole matches
// and non-matches, each refused construct named with its offset), RegexDfa's state cap,
// RegexPrefix's viability of prefixes (multi-byte characters included), and its token mask on small
// made-up vocabularies, against stepping the NFA through every token.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampling/regex_dfa.h"
#include "sampling/regex_nfa.h"
#include "sampling/regex_prefix.h"
#include "token_mask_test_util.h"

namespace dsv4 {
namespace {

using Ids = std::vector<int32_t>;

struct MatchCase {
  std::string pattern;
  std::vector<std::string> matches;
  std::vector<std::string> non_matches;
};

TEST(RegexNfa, EachConstructMatchesWhatPythonsFullmatchDoes) {
  const std::vector<MatchCase> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "abd"}},
      {"", {""}, {"a"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"ab*c", {"ac", "abc", "abbbc"}, {"abd", "ab"}},
      {"ab+c", {"abc", "abbc"}, {"ac"}},
      {"colou?r", {"color", "colour"}, {"colouur"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaaa"}, {"a"}},
      {"a{2,3}", {"aa", "aaa"}, {"a", "aaaa"}},
      {"a{,2}", {"", "a", "aa"}, {"aaa"}},
      {"a{0}b", {"b"}, {"ab"}},
      {"(ab){2}", {"abab"}, {"ab", "ababab"}},
      {"x{", {"x{"}, {"x"}},        // a '{' that begins no count is a literal, as in Python
      {"a{1,x}", {"a{1,x}"}, {"a"}},
      {"a*?b", {"b", "aab"}, {"a"}},  // lazy: the same whole matches as greedy
      {"(ab|cd)*", {"", "abcd", "cdab"}, {"abc", "ac"}},
      {"(?:ab)+", {"ab", "abab"}, {""}},
      {"(?P<year>\\d{4})-(?<month>\\d\\d)", {"2024-01"}, {"2024-1"}},
      {"^abc$", {"abc"}, {"abcabc", ""}},
      {"a\\$", {"a$"}, {"a"}},
      {"a\\\\$", {"a\\"}, {"a\\$"}},  // an escaped backslash, then the anchor
      {"[a-c_0-9]+", {"a_9", "cab"}, {"d", "", "A"}},
      {"[^a-c]", {"d", "\n", "\xC3\xA9"}, {"a", "dd", ""}},
      {"[]a]", {"]", "a"}, {"b"}},
      {"[a-]", {"a", "-"}, {"b"}},
      {"[-a]", {"a", "-"}, {"b"}},
      {"[\\d\\s.]", {"1", " ", "."}, {"a"}},
      {"[\\]\\\\]", {"]", "\\"}, {"a"}},
      {"[^\\s\\S]", {}, {"", "a", " "}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"55a-1234", "555-123"}},
      {"\\w+", {"ab_9Z"}, {"a-b", "\xC3\xA9"}},
      {"\\s", {" ", "\t", "\n", "\r", "\f", "\v"}, {"a"}},
      {"\\D", {"a", "\xC3\xA9"}, {"5"}},
      {"\\W", {"-", "\xC3\xA9"}, {"a", "_"}},
      {"\\S", {"a"}, {" "}},
      {"\\.\\\\\\n\\t\\r", {".\\\n\t\r"}, {"a\\\n\t\r"}},
      {"\\(\\)\\[\\]\\{\\}\\*\\+\\?\\|\\^\\$\\-\\/", {"()[]{}*+?|^$-/"}, {}},
      {"\\x41\\u00e9\\U0001F600", {"A\xC3\xA9\xF0\x9F\x98\x80"}, {"Ae"}},
      {"\\ud83d\\ude00", {"\xF0\x9F\x98\x80"}, {}},  // a surrogate pair as JSON writes it
      {".", {"a", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}, {"\n", "ab", "", "\xC3", "\xF0\x9F\x98"}},
      {"[\xC3\xA9-\xC3\xBC]", {"\xC3\xA9", "\xC3\xB6", "\xC3\xBC"}, {"e", "\xC3\xBF", "\xC3\xA8"}},
      {"[\\u0800-\\U00010400]", {"\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80", "\xF0\x90\x90\x80"},
       {"\xDF\xBF", "\xF0\x90\x90\x81"}},
      {"caf\xC3\xA9+", {"caf\xC3\xA9\xC3\xA9"}, {"cafe"}},
  };
  for (const MatchCase& c : cases) {
    const RegexNfa regex = RegexNfa::compile(c.pattern);
    for (const std::string& text : c.matches)
      EXPECT_TRUE(regex.full_match(text)) << "/" << c.pattern << "/ should match \"" << text << "\"";
    for (const std::string& text : c.non_matches)
      EXPECT_FALSE(regex.full_match(text)) << "/" << c.pattern << "/ should not match \"" << text << "\"";
  }
}

// Every refused construct is named, with its offset (in characters) in the pattern.
TEST(RegexNfa, RefusesWhatItDoesNotSupportNamingTheConstructAndItsOffset) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "the backreference '\\1' at offset 3"},
      {"(?P<x>a)(?P=x)", "the named backreference '(?P=' at offset 8"},
      {"\\k<x>", "the named backreference '\\k' at offset 0"},
      {"a(?=b)", "the lookahead '(?=' at offset 1"},
      {"a(?!b)", "the lookahead '(?!' at offset 1"},
      {"(?<=a)b", "the lookbehind '(?<=' at offset 0"},
      {"(?<!a)b", "the lookbehind '(?<!' at offset 0"},
      {"(?>a)", "the atomic group '(?>' at offset 0"},
      {"(?i)a", "the inline flag group '(?...)' at offset 0"},
      {"(?#note)a", "the comment '(?#' at offset 0"},
      {"a*+", "the possessive quantifier '+' after the quantifier at offset 1"},
      {"a**", "a repeated quantifier (multiple repeat) at offset 2"},
      {"\\bword", "the word boundary '\\b' at offset 0"},
      {"\\Aa", "the anchor '\\A' at offset 0"},
      {"a\\Z", "the anchor '\\Z' at offset 1"},
      {"\\p{L}", "the Unicode property '\\p' at offset 0"},
      {"a^b", "the anchor '^' other than as the pattern's first character at offset 1"},
      {"a$b", "the anchor '$' other than as the pattern's last character at offset 1"},
      {"\xC3\xA9$\xC3\xA9", "at offset 1"},  // offsets count characters, not bytes
      {"a{1001}", "the count 1001 (above 1000) in the quantifier at offset 1"},
      {"a{2,1001}", "the count 1001"},
      {"(a{1000}){1000}", "more than 200000 automaton states"},
      {"a{3,2}", "the quantifier's minimum is above its maximum at offset 1"},
      {"(ab", "missing ')' for the group opened at offset 0"},
      {"ab)", "unbalanced ')' at offset 2"},
      {"[ab", "missing ']' for the class opened at offset 0"},
      {"*a", "nothing to repeat before '*' at offset 0"},
      {"a|{2}", "nothing to repeat before '{' at offset 2"},
      {"\\q", "the unknown escape '\\q' at offset 0"},
      {"a\\", "a trailing backslash at offset 1"},
      {"[z-a]", "a range whose end is below its start at offset 1"},
      {"[a-\\d]", "a range ending in a class escape at offset 3"},
      {"\\x4", "an escape needing 2 hex digits at offset 0"},
      {"\\ud800", "a lone surrogate"},
      {"(?P<>a)", "a bad group name at offset 4"},
      {"\xC3", "not valid UTF-8 at byte 0"},
  };
  for (const auto& [pattern, message] : cases) {
    try {
      (void)RegexNfa::compile(pattern);
      ADD_FAILURE() << "/" << pattern << "/ was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << "/" << pattern << "/: \"" << e.what() << "\" lacks \"" << message << "\"";
    }
  }
  const std::string deep = std::string(300, '(') + "a" + std::string(300, ')');
  EXPECT_THROW((void)RegexNfa::compile(deep), UsageError);
  EXPECT_NO_THROW((void)RegexNfa::compile("a{1000}"));
}

RegexPrefix after(const std::string& pattern, const std::string& text) {
  RegexPrefix prefix(std::make_shared<const RegexNfa>(RegexNfa::compile(pattern)));
  prefix.advance(text);
  return prefix;
}

TEST(RegexPrefix, APrefixOfAMatchIsViableAndOthersAreNot) {
  EXPECT_TRUE(after("\\d{3}-\\d{4}", "").viable());
  EXPECT_TRUE(after("\\d{3}-\\d{4}", "555").viable());
  EXPECT_TRUE(after("\\d{3}-\\d{4}", "555-").viable());
  EXPECT_FALSE(after("\\d{3}-\\d{4}", "555-").is_match());
  EXPECT_FALSE(after("\\d{3}-\\d{4}", "5a").viable());
  EXPECT_FALSE(after("\\d{3}-\\d{4}", "5555").viable());
  EXPECT_FALSE(after("\\d{3}-\\d{4}", "5a").is_match());
  RegexPrefix full = after("\\d{3}-\\d{4}", "555-1234");
  EXPECT_TRUE(full.is_match());
  EXPECT_FALSE(full.can_continue());
  RegexPrefix more = after("a+", "aaa");
  EXPECT_TRUE(more.is_match());
  EXPECT_TRUE(more.can_continue());
  RegexPrefix none = after("(yes|no)", "ye");
  EXPECT_FALSE(none.is_match());
  EXPECT_TRUE(none.can_continue());
}

// A text may stop inside a multi-byte character (a token can end there), but it is no match
// until the character is whole.
TEST(RegexPrefix, AMultiByteCharacterMatchesOnlyWhole) {
  RegexPrefix half = after("[\xC3\xA9-\xC3\xBC]", "\xC3");
  EXPECT_TRUE(half.viable());
  EXPECT_FALSE(half.is_match());
  EXPECT_TRUE(half.can_continue());
  RegexPrefix whole = after("[\xC3\xA9-\xC3\xBC]", "\xC3\xB6");
  EXPECT_TRUE(whole.is_match());
  EXPECT_FALSE(whole.can_continue());
  EXPECT_FALSE(after("[\xC3\xA9-\xC3\xBC]", "\xC3\xA8").viable());  // è is below é
  EXPECT_FALSE(after("[\xC3\xA9-\xC3\xBC]", "\xC3(").viable());     // not a continuation byte
  RegexPrefix three_of_four = after(".", "\xF0\x9F\x98");
  EXPECT_TRUE(three_of_four.viable());
  EXPECT_FALSE(three_of_four.is_match());
  EXPECT_TRUE(after(".", "\xF0\x9F\x98\x80").is_match());
  EXPECT_FALSE(after(".", "\xED\xA0").viable());  // the start of a surrogate, never valid UTF-8
  EXPECT_FALSE(after("\\w", "\xC3").viable());
}

// Id 0 is the end of sequence (no bytes, as the engine gives special tokens).
const std::vector<std::string> kVocabulary = {"", "1", "12", "123", "-", "-4",
                                              "a", "1a", "\xC3", "\xA9", "\xC3\xA9", " "};
constexpr int32_t kEos = 0;

Ids allowed_ids(RegexPrefix& prefix, const JsonTokenMask& mask, bool eos_allowed = true) {
  return testing::allowed_ids(prefix, mask, kEos, eos_allowed);
}

TEST(RegexPrefix, AllowsTheTokensThatKeepTheTextTheStartOfAMatch) {
  const JsonTokenMask mask(kVocabulary);
  RegexPrefix start = after("\\d{2,3}(-\\d)?", "");
  EXPECT_EQ(allowed_ids(start, mask), (Ids{1, 2, 3}));
  // "12" is a match that may go on: the end of sequence, a third digit or the dash.
  RegexPrefix twelve = after("\\d{2,3}(-\\d)?", "12");
  EXPECT_EQ(allowed_ids(twelve, mask), (Ids{kEos, 1, 4, 5}));
  EXPECT_EQ(allowed_ids(twelve, mask, /*eos_allowed=*/false), (Ids{1, 4, 5}));
  RegexPrefix done = after("\\d{2,3}(-\\d)?", "12-4");
  EXPECT_EQ(allowed_ids(done, mask), (Ids{kEos}));
  EXPECT_FALSE(done.can_continue());
  // A token may end inside a character, or finish one.
  RegexPrefix accent = after("caf\xC3\xA9", "caf");
  EXPECT_EQ(allowed_ids(accent, mask), (Ids{8, 10}));
  accent.advance("\xC3");
  EXPECT_EQ(allowed_ids(accent, mask), (Ids{9}));
  RegexPrefix dead = after("a", "b");
  EXPECT_EQ(allowed_ids(dead, mask), (Ids{}));
}

// The vocabulary walk (shared prefixes, skipped runs) against stepping the NFA itself through the
// text and each token, on random vocabularies over a small alphabet with a two-byte character.
TEST(RegexPrefix, EqualsSteppingTheNfaThroughEveryToken) {
  const std::vector<std::string> patterns = {
      "(a|b)*a(a|b){6}",
      "[ab]{2,5}( [ab\xC3\xA9]+)*",
      "(ab|a\xC3\xA9|b+)*c?",
      "[^a]{3}b*",
      ".{0,6}a",
  };
  std::mt19937 rng(11);
  const std::vector<std::string> alphabet = {"a", "b", " ", "c", "\xC3\xA9", "\xC3", "\xA9"};
  for (const std::string& pattern : patterns) {
    const auto regex = std::make_shared<const RegexNfa>(RegexNfa::compile(pattern));
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<std::string> vocabulary(600);
      for (size_t id = 1; id < vocabulary.size(); ++id)  // id 0 stays empty: the end of sequence
        for (size_t n = 1 + rng() % 18; n > 0; --n) vocabulary[id] += alphabet[rng() % 8 < 6 ? rng() % 2 : rng() % 4];
      for (size_t id = 1; id < 40; ++id) vocabulary[id] = alphabet[rng() % alphabet.size()] + alphabet[rng() % 3];
      const JsonTokenMask mask(vocabulary);
      std::string text;
      for (size_t n = rng() % 8; n > 0; --n) text += alphabet[rng() % 3];
      RegexPrefix prefix(regex);
      prefix.advance(text);
      std::vector<uint8_t> allowed;
      const size_t count = prefix.allowed_tokens(mask, kEos, true, allowed);
      const int32_t start = regex->start();
      std::vector<int32_t> at_text = regex->closure(std::span(&start, 1));
      for (const char c : text) at_text = regex->step(at_text, static_cast<uint8_t>(c));
      size_t want_count = 0;
      for (size_t id = 0; id < vocabulary.size(); ++id) {
        std::vector<int32_t> set = at_text;
        for (const char c : vocabulary[id]) set = regex->step(set, static_cast<uint8_t>(c));
        const bool want = id == static_cast<size_t>(kEos) ? regex->accepts(at_text) : !set.empty();
        ASSERT_EQ(allowed[id] != 0, want) << "/" << pattern << "/, text \"" << text << "\", token " << id << " \""
                                          << vocabulary[id] << "\"";
        want_count += want;
      }
      EXPECT_EQ(count, want_count);
      std::vector<uint8_t> again;  // from the cache
      prefix.allowed_tokens(mask, kEos, true, again);
      EXPECT_EQ(again, allowed);
    }
  }
}

// A pattern whose DFA has 2^14 states, over every a/b token of up to 12 bytes: the walk meets
// 8,190 states, and the cache is cut back to kMaxCachedStates during it, keeping the states the
// walk stands on, without changing the mask.
TEST(RegexPrefix, TheCacheIsCutBackDuringAWalkWithoutChangingTheMask) {
  std::vector<std::string> vocabulary = {""};
  for (size_t length = 1; length <= 12; ++length)
    for (size_t bits = 0; bits < (size_t{1} << length); ++bits) {
      std::string token;
      for (size_t k = 0; k < length; ++k) token += (bits >> k) & 1 ? 'b' : 'a';
      vocabulary.push_back(token);
    }
  vocabulary.push_back("c");
  const JsonTokenMask mask(vocabulary);
  const auto regex = std::make_shared<const RegexNfa>(RegexNfa::compile("(a|b)*a(a|b){13}x"));
  RegexPrefix prefix(regex);
  prefix.advance("ba");
  std::vector<uint8_t> allowed;
  EXPECT_EQ(prefix.allowed_tokens(mask, kEos, true, allowed), vocabulary.size() - 2);  // all but "c" and the end
  EXPECT_LE(prefix.cached_states(), RegexPrefix::kMaxCachedStates + mask.max_token_bytes() + 1);
  for (const std::string& next : {std::string("abbababbaaaab"), std::string("x")}) {
    prefix.advance(next);
    EXPECT_TRUE(prefix.viable());
  }
  EXPECT_TRUE(prefix.is_match());
  EXPECT_FALSE(prefix.can_continue());
}

// A capped DFA (as a JSON schema's pattern uses, whose cursors' copies hold state numbers): a byte
// that would need a state past the cap leads to kDead, stricter than the pattern, never looser.
TEST(RegexDfa, AByteNeedingAStatePastTheCapLeadsNowhere) {
  RegexDfa capped(std::make_shared<const RegexNfa>(RegexNfa::compile("abc|abd")), 3);  // kDead, start, "a"
  const int32_t a = capped.step(capped.start(), 'a');
  EXPECT_NE(a, RegexDfa::kDead);
  EXPECT_EQ(capped.step(a, 'b'), RegexDfa::kDead);
  EXPECT_EQ(capped.size(), 3u);
  RegexDfa open(std::make_shared<const RegexNfa>(RegexNfa::compile("abc|abd")));
  int32_t state = open.start();
  for (const char c : std::string("abd")) state = open.step(state, static_cast<uint8_t>(c));
  EXPECT_TRUE(open.is_match(state));
  EXPECT_FALSE(open.can_continue(state));
}

TEST(RegexPrefix, RefusesNoPattern) { EXPECT_THROW(RegexPrefix(nullptr), UsageError); }

}  // namespace
}  // namespace dsv4
