// JsonNumberRange (sampling/json_number_range.h) against a validator that reads numbers as
// doubles (strtod): hand cases at the edges (0.1 against minimum 0.1, exclusive ends, -0,
// integers), and every JSON number of up to five characters against random ranges: whether it is
// in the range, and whether a prefix of up to three characters can still reach one of them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sampling/json_number_range.h"

namespace dsv4 {
namespace {

struct Limits {
  bool has_lower = false, lower_exclusive = false, has_upper = false, upper_exclusive = false;
  double lower = 0, upper = 0;
  int step = 0;  // multipleOf; 0: none
};

JsonNumberRange range_of(const Limits& l) {
  JsonNumberRange r;
  if (l.has_lower) r.restrict_below(l.lower, l.lower_exclusive);
  if (l.has_upper) r.restrict_above(l.upper, l.upper_exclusive);
  if (l.step > 0) {
    EXPECT_TRUE(r.restrict_multiple_of(l.step));
  }
  return r;
}

// The validator's reading: the text's double against the bounds; a step's multiples are the
// integers it divides, as written ("23.9999999999999999999" reads as the double 24, but is not an
// integer: the range does not lead there).
bool validator_takes(const Limits& l, const std::string& text) {
  const double v = std::strtod(text.c_str(), nullptr);
  if (l.has_lower && (l.lower_exclusive ? !(v > l.lower) : !(v >= l.lower))) return false;
  if (l.has_upper && (l.upper_exclusive ? !(v < l.upper) : !(v <= l.upper))) return false;
  if (l.step > 0) {
    const size_t point = text.find('.');
    if (point != std::string::npos && text.find_first_not_of('0', point + 1) != std::string::npos) return false;
    if (std::fmod(v, l.step) != 0) return false;  // short integers: exact
  }
  return true;
}

// Every JSON number without an exponent of at most `max_chars` characters (integers only if
// asked) that begins with `text`, a valid start of one.
void numbers(const std::string& text, size_t max_chars, bool integers, std::vector<std::string>& out) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string body = negative ? text.substr(1) : text;
  const bool has_point = body.find('.') != std::string::npos;
  const bool complete = !body.empty() && body.back() != '.';
  if (complete) out.push_back(text);
  if (text.size() == max_chars) return;
  if (text.empty()) numbers("-", max_chars, integers, out);
  if (body != "0")  // "0" takes no more integer digits
    for (char d = '0'; d <= '9'; ++d) numbers(text + d, max_chars, integers, out);
  if (!integers && complete && !has_point) numbers(text + '.', max_chars, integers, out);
}

// Whether some long completion of p (up to 32 characters) is taken: p run on with nines or
// zeros, after a point too, the forms that reach just below or above a bound that is not a short
// decimal ("3.2999..." reads as the double 3.3).
bool long_witness(const Limits& l, const std::string& p, bool integer_only) {
  const bool has_point = p.find('.') != std::string::npos;
  const std::string body = p[0] == '-' ? p.substr(1) : p;
  for (size_t k = 1; p.size() + k <= JsonNumberRange::kMaxChars; ++k)
    for (const char fill : {'0', '9'}) {
      std::vector<std::string> candidates;
      if (body != "0" && !body.empty() && !p.ends_with('.')) candidates.push_back(p + std::string(k, fill));
      if (has_point) candidates.push_back(p + std::string(k, fill));
      if (!integer_only && !has_point && !body.empty() && p.size() + k + 1 <= JsonNumberRange::kMaxChars)
        candidates.push_back(p + "." + std::string(k, fill));
      for (const std::string& c : candidates)
        if (validator_takes(l, c)) return true;
    }
  return false;
}

TEST(JsonNumberRange, EdgesAsAValidatorReadingDoublesSeesThem) {
  JsonNumberRange tenth;
  tenth.restrict_below(0.1, false);
  EXPECT_TRUE(tenth.contains("0.1"));  // the double 0.1 is a little more than a tenth: still taken
  EXPECT_FALSE(tenth.contains("0.09999999999999999"));
  EXPECT_TRUE(tenth.contains("0.09999999999999999999"));  // reads as the double 0.1
  EXPECT_TRUE(tenth.reachable("0.0", false));
  EXPECT_FALSE(tenth.reachable("0.08", false));
  EXPECT_FALSE(tenth.reachable("-", false));

  JsonNumberRange age;  // an integer in [0, 150]
  age.restrict_below(0, false);
  age.restrict_above(150, false);
  for (const char* yes : {"0", "1", "15", "150", "-"}) EXPECT_TRUE(age.reachable(yes, true)) << yes;  // "-0" is 0
  for (const char* no : {"151", "2000", "-1", "16.", "1."}) EXPECT_FALSE(age.reachable(no, true)) << no;
  EXPECT_TRUE(age.contains("150"));
  EXPECT_TRUE(age.contains("-0"));
  EXPECT_FALSE(age.contains("151"));

  JsonNumberRange open_unit;  // (0, 1)
  open_unit.restrict_below(0, true);
  open_unit.restrict_above(1, true);
  EXPECT_TRUE(open_unit.reachable("0", false));
  EXPECT_TRUE(open_unit.reachable("0.", false));
  EXPECT_FALSE(open_unit.contains("0"));
  EXPECT_FALSE(open_unit.contains("-0"));
  EXPECT_FALSE(open_unit.reachable("1", false));
  EXPECT_FALSE(open_unit.reachable("-", false));
  EXPECT_FALSE(open_unit.allows_some(true));
  EXPECT_TRUE(open_unit.allows_some(false));

  JsonNumberRange negative;  // x < 0
  negative.restrict_above(0, true);
  EXPECT_FALSE(negative.contains("-0"));
  EXPECT_TRUE(negative.reachable("-0", false));  // -0.5
  EXPECT_FALSE(negative.reachable("-0", true));
  EXPECT_FALSE(negative.reachable("0", false));

  JsonNumberRange huge;  // beyond 32 characters: no number reaches it
  huge.restrict_below(1e40, false);
  EXPECT_FALSE(huge.allows_some(false));

  JsonNumberRange fives;  // multiples of 5 in [3, 12]
  fives.restrict_below(3, false);
  fives.restrict_above(12, false);
  EXPECT_TRUE(fives.restrict_multiple_of(5));
  EXPECT_FALSE(fives.restrict_multiple_of(0.5));  // not an integer step: not taken
  for (const char* yes : {"5", "10", "10.", "10.0", "1"}) EXPECT_TRUE(fives.reachable(yes, false)) << yes;  // 1 -> 10
  for (const char* no : {"2", "11", "5.5", "-", "12"}) EXPECT_FALSE(fives.reachable(no, false)) << no;
  EXPECT_TRUE(fives.contains("10.0"));
  EXPECT_FALSE(fives.contains("11"));
  JsonNumberRange both_steps;  // 4 and 6: multiples of 12
  EXPECT_TRUE(both_steps.restrict_multiple_of(4));
  EXPECT_TRUE(both_steps.restrict_multiple_of(6));
  EXPECT_FALSE(both_steps.contains("8"));
  EXPECT_TRUE(both_steps.contains("-24"));

  JsonNumberRange tighter;  // restrict_to keeps the tighter end of each side
  tighter.restrict_below(-5, false);
  JsonNumberRange other;
  other.restrict_below(2, true);
  other.restrict_above(3, false);
  tighter.restrict_to(other);
  EXPECT_FALSE(tighter.contains("2"));
  EXPECT_TRUE(tighter.contains("2.5"));
  EXPECT_FALSE(tighter.contains("3.01"));
}

TEST(JsonNumberRange, EveryShortNumberAndPrefixAgreesWithTheValidator) {
  std::vector<std::string> all, integers;
  numbers("", 5, false, all);
  numbers("", 5, true, integers);
  ASSERT_GT(all.size(), 100000u);
  std::mt19937 rng(11);
  // Bounds in tenths from 0 to 60, or negative integers to -59: every prefix of up to three
  // characters that can reach the range reaches it within five characters ("12.35" between 12.3
  // and 12.4), so the short numbers are witnesses enough.
  const auto bound = [&] {
    if (rng() % 2) return -static_cast<double>(rng() % 60);
    return static_cast<double>(rng() % 601) / 10.0;
  };
  for (int trial = 0; trial < 24; ++trial) {
    Limits l;
    l.has_lower = rng() % 4 != 0;
    l.has_upper = rng() % 4 != 0;
    l.lower = bound();
    l.upper = bound();
    l.lower_exclusive = rng() % 2;
    l.upper_exclusive = rng() % 2;
    const int steps[] = {0, 0, 2, 3, 7, 10};
    l.step = steps[rng() % 6];
    if (l.has_lower && l.has_upper && l.lower > l.upper) std::swap(l.lower, l.upper);
    const JsonNumberRange r = range_of(l);
    const std::string what = "range " + std::to_string(trial) + " [" + (l.has_lower ? std::to_string(l.lower) : "-inf") +
                             (l.lower_exclusive ? " excl" : "") + ", " + (l.has_upper ? std::to_string(l.upper) : "inf") +
                             (l.upper_exclusive ? " excl" : "") + "] step " + std::to_string(l.step);
    for (const bool integer_only : {false, true}) {
      std::set<std::string> reaches;  // prefixes of up to three characters of numbers in range
      for (const std::string& n : integer_only ? integers : all) {
        const bool in = validator_takes(l, n);
        ASSERT_EQ(r.contains(n), in) << what << ": " << n;
        if (in)
          for (size_t len = 1; len <= std::min<size_t>(3, n.size()); ++len) reaches.insert(n.substr(0, len));
      }
      std::vector<std::string> prefixes;
      numbers("", 3, integer_only, prefixes);
      for (const std::string p : {"-", "1.", "-1.", "0.", "-0."}) prefixes.push_back(p);
      for (const std::string& p : prefixes) {
        if (integer_only && p.find('.') != std::string::npos) continue;
        const bool witnessed = reaches.count(p) > 0 || long_witness(l, p, integer_only);
        EXPECT_EQ(r.reachable(p, integer_only), witnessed) << what << (integer_only ? ", integers" : "") << ": prefix " << p;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
