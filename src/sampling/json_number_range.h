// A JSON Schema's numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) and the
// test the sampler needs while a number is being written: can the digits so far still end as a
// number inside the bounds? A number is in the range when a validator that reads numbers as
// doubles (JavaScript's, Python's for fractions) takes it: "0.1" meets minimum 0.1, although the
// double 0.1 is a little more than a tenth. Each bound is kept as the exact decimal where that
// reading starts or stops taking numbers (the midpoint between the bound and its neighbouring
// double, included when a tie there rounds to the taken side), so every test is an exact decimal
// comparison.
//
// A number under bounds is written in JSON's grammar without an exponent and in at most
// kMaxChars characters (the sign, the digits and the point): the candidates a prefix can still
// reach are then intervals of decimals with a known number of fraction digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dsv4 {

class JsonNumberRange {
 public:
  static constexpr size_t kMaxChars = 32;

  // A non-negative decimal: integer digits without leading zeros ("" for 0), fraction digits
  // without trailing zeros.
  struct Magnitude {
    std::string integer, fraction;
  };
  // One end of the range, as the decimals taken: a signed exact decimal, and whether it is excluded.
  struct Bound {
    bool negative = false;
    Magnitude magnitude;
    bool exclusive = false;
  };

  // Narrows the range by x >= v (x > v when exclusive), or x <= v (x < v). v must be finite.
  void restrict_below(double v, bool exclusive);  // a lower bound ("minimum")
  void restrict_above(double v, bool exclusive);  // an upper bound ("maximum")
  // Narrows the range to multiples of `step` (multipleOf). Only integer steps up to 2^53 are
  // taken (returns false for others, which validators reading doubles disagree on: 0.29 is not a
  // multiple of 0.01 in binary); a number is then a multiple when it is an integer divisible by it.
  bool restrict_multiple_of(double step);
  // Narrows the range to its intersection with `other`.
  void restrict_to(const JsonNumberRange& other);

  bool bounded() const { return lower_.has_value() || upper_.has_value() || step_ > 0; }
  // Whether some number (an integer if integer_only) within kMaxChars characters lies in the range.
  bool allows_some(bool integer_only) const { return reachable("", integer_only) || reachable("-", integer_only); }
  // Whether some number of at most kMaxChars characters, no exponent (an integer if
  // integer_only), that begins with `text` lies in the range. `text` is the start of a JSON number
  // ("-", "0", "12.", "-3.25", ...), or "" for any number not starting with '-'.
  bool reachable(std::string_view text, bool integer_only) const;
  // Whether the complete number `text` (JSON's grammar, no exponent) lies in the range.
  bool contains(std::string_view text) const;

 private:
  struct Side {
    Magnitude low;
    bool low_exclusive = false;
    std::optional<Bound> high;
    bool empty = false;
  };
  Side side(bool negative) const;
  // Keeps the tighter of `end` and b: the higher for a lower end (tighter = 1), the lower for an
  // upper one (-1); at the same decimal, excluded if either excludes it.
  static void keep_tighter(std::optional<Bound>& end, const Bound& b, int tighter);
  bool reachable_magnitudes(const Side& s, const Magnitude& from, const Magnitude& to, bool to_inclusive,
                            size_t fraction_digits) const;

  std::optional<Bound> lower_, upper_;
  int64_t step_ = 0;  // multipleOf, an integer; 0: none
};

}  // namespace dsv4
