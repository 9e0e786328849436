// JsonNumberRange: exact decimal bounds, and which numbers a prefix can still become (see the
// header). Decimals are digit strings; the operations are the few the reachability test needs.
#include "sampling/json_number_range.h"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>

namespace dsv4 {
namespace {

using Magnitude = JsonNumberRange::Magnitude;
__extension__ using Int128 = __int128;  // GCC's and Clang's: the magnitudes of 32-character numbers exceed 64 bits

Magnitude normalized(std::string integer, std::string fraction) {
  const size_t first = integer.find_first_not_of('0');
  integer = first == std::string::npos ? std::string() : integer.substr(first);
  const size_t last = fraction.find_last_not_of('0');
  fraction = last == std::string::npos ? std::string() : fraction.substr(0, last + 1);
  return {std::move(integer), std::move(fraction)};
}

// "12.5", "0", "3.": digits with at most one point.
Magnitude parse_magnitude(std::string_view digits) {
  const size_t point = digits.find('.');
  if (point == std::string_view::npos) return normalized(std::string(digits), "");
  return normalized(std::string(digits.substr(0, point)), std::string(digits.substr(point + 1)));
}

bool is_zero(const Magnitude& m) { return m.integer.empty() && m.fraction.empty(); }

int compare(const Magnitude& a, const Magnitude& b) {
  if (a.integer.size() != b.integer.size()) return a.integer.size() < b.integer.size() ? -1 : 1;
  if (const int c = a.integer.compare(b.integer); c != 0) return c < 0 ? -1 : 1;
  const size_t n = std::max(a.fraction.size(), b.fraction.size());
  for (size_t i = 0; i < n; ++i) {
    const char x = i < a.fraction.size() ? a.fraction[i] : '0', y = i < b.fraction.size() ? b.fraction[i] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

// m * 10^j.
Magnitude times_pow10(const Magnitude& m, size_t j) {
  std::string integer = m.integer, fraction = m.fraction;
  for (size_t i = 0; i < j; ++i) {
    integer += fraction.empty() ? '0' : fraction[0];
    if (!fraction.empty()) fraction.erase(0, 1);
  }
  return normalized(std::move(integer), std::move(fraction));
}

// m + 10^-r, for m with at most r fraction digits.
Magnitude plus_unit(const Magnitude& m, size_t r) {
  std::string digits = m.integer + m.fraction + std::string(r - m.fraction.size(), '0');
  size_t i = digits.size();
  while (i > 0 && digits[i - 1] == '9') digits[--i] = '0';
  if (i == 0) digits.insert(digits.begin(), '1');
  else ++digits[i - 1];
  const size_t integer_digits = digits.size() - r;
  return normalized(digits.substr(0, integer_digits), digits.substr(integer_digits));
}

// The smallest decimal with at most r fraction digits that is >= m (> m when strictly).
Magnitude round_up(const Magnitude& m, size_t r, bool strictly) {
  if (m.fraction.size() > r) return plus_unit(normalized(m.integer, m.fraction.substr(0, r)), r);
  return strictly ? plus_unit(m, r) : m;
}

// A long double that is a double or the midpoint of two adjacent ones, exactly: its decimal
// expansion ends within 1,075 fraction digits.
JsonNumberRange::Bound exact_bound(long double v, bool exclusive) {
  std::array<char, 1500> buffer{};
  const auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), v, std::chars_format::fixed, 1100);
  if (error != std::errc()) throw std::logic_error("JsonNumberRange: a bound did not convert");
  std::string_view text(buffer.data(), static_cast<size_t>(end - buffer.data()));
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  JsonNumberRange::Bound b{negative, parse_magnitude(text), exclusive};
  if (is_zero(b.magnitude)) b.negative = false;  // -0 is 0
  return b;
}

// Whether a double's significand is even (round-to-nearest-even sends a tie to it).
bool even(double v) { return (std::bit_cast<uint64_t>(v) & 1) == 0; }

// The decimals a validator that reads numbers as doubles takes for x >= v (x > v when exclusive):
// those whose nearest double is v or above (above v), from the midpoint below v (above it), which
// counts when a tie there rounds to the qualifying side.
JsonNumberRange::Bound lower_as_read(double v, bool exclusive) {
  const double below = std::nextafter(v, -HUGE_VAL), above = std::nextafter(v, HUGE_VAL);
  if (!exclusive)
    return std::isfinite(below) ? exact_bound((static_cast<long double>(below) + v) / 2, !even(v)) : exact_bound(v, false);
  return std::isfinite(above) ? exact_bound((static_cast<long double>(above) + v) / 2, !even(above)) : exact_bound(v, true);
}

// The same for x <= v (x < v).
JsonNumberRange::Bound upper_as_read(double v, bool exclusive) {
  const double below = std::nextafter(v, -HUGE_VAL), above = std::nextafter(v, HUGE_VAL);
  if (!exclusive)
    return std::isfinite(above) ? exact_bound((static_cast<long double>(above) + v) / 2, !even(v)) : exact_bound(v, false);
  return std::isfinite(below) ? exact_bound((static_cast<long double>(below) + v) / 2, !even(below)) : exact_bound(v, true);
}

// An integral magnitude as a 128-bit integer, or none past 37 digits (numbers here have at most
// 32 characters, so a larger one only stands for "beyond any of them").
std::optional<Int128> as_int128(const Magnitude& m) {
  if (!m.fraction.empty() || m.integer.size() > 37) return std::nullopt;
  Int128 v = 0;
  for (const char d : m.integer) v = v * 10 + (d - '0');
  return v;
}

Magnitude from_int128(Int128 v) {
  std::string digits;
  for (; v > 0; v /= 10) digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
  return {digits, ""};
}

// a vs b as signed decimals: -1, 0 or 1.
int compare_signed(bool a_negative, const Magnitude& a, bool b_negative, const Magnitude& b) {
  if (a_negative != b_negative) return a_negative ? -1 : 1;  // zero is never negative here
  const int c = compare(a, b);
  return a_negative ? -c : c;
}

}  // namespace

void JsonNumberRange::keep_tighter(std::optional<Bound>& end, const Bound& b, int tighter) {
  const int c = end ? compare_signed(b.negative, b.magnitude, end->negative, end->magnitude) : tighter;
  if (c == tighter) end = b;
  else if (c == 0) end->exclusive = end->exclusive || b.exclusive;
}

void JsonNumberRange::restrict_below(double v, bool exclusive) { keep_tighter(lower_, lower_as_read(v, exclusive), 1); }

void JsonNumberRange::restrict_above(double v, bool exclusive) { keep_tighter(upper_, upper_as_read(v, exclusive), -1); }

bool JsonNumberRange::restrict_multiple_of(double step) {
  if (!(step >= 1 && step <= 0x1p53 && std::floor(step) == step)) return false;
  const auto k = static_cast<int64_t>(step);
  if (step_ == 0) {
    step_ = k;
  } else {
    const Int128 both = static_cast<Int128>(step_) / std::gcd(step_, k) * k;
    if (both > (Int128{1} << 62)) return false;  // no number of 32 characters cares: keep the first
    step_ = static_cast<int64_t>(both);
  }
  return true;
}

void JsonNumberRange::restrict_to(const JsonNumberRange& other) {
  if (other.step_ > 0) restrict_multiple_of(static_cast<double>(other.step_));
  if (other.lower_) keep_tighter(lower_, *other.lower_, 1);
  if (other.upper_) keep_tighter(upper_, *other.upper_, -1);
}

// The range as magnitudes of one sign: [low, high], either end maybe excluded, high maybe absent;
// `empty` when no magnitude of that sign is in it.
JsonNumberRange::Side JsonNumberRange::side(bool negative) const {
  Side s;
  if (!negative) {
    if (upper_ && upper_->negative) s.empty = true;
    if (lower_ && !lower_->negative) s.low = lower_->magnitude, s.low_exclusive = lower_->exclusive;
    s.high = upper_;
  } else {  // x = -m: m in [-upper, -lower] (an upper bound of 0 keeps its exclusion: -0 is 0)
    if (lower_ && !lower_->negative && !is_zero(lower_->magnitude)) s.empty = true;
    if (upper_ && (upper_->negative || is_zero(upper_->magnitude)))
      s.low = upper_->magnitude, s.low_exclusive = upper_->exclusive;
    if (lower_) s.high = Bound{false, lower_->magnitude, lower_->exclusive};
  }
  return s;
}

// Whether some decimal with at most `fraction_digits` fraction digits in [from, to) (or [from, to]
// when to_inclusive) lies on side `s`.
bool JsonNumberRange::reachable_magnitudes(const Side& s, const Magnitude& from, const Magnitude& to, bool to_inclusive,
                                           size_t fraction_digits) const {
  if (s.empty) return false;
  // The smallest candidate at or past the side's low end (a multiple of the step if there is one:
  // then only integers are candidates).
  if (step_ > 0) fraction_digits = 0;
  Magnitude x = compare(from, s.low) > 0 ? from : round_up(s.low, fraction_digits, s.low_exclusive);
  if (step_ > 0) {
    const std::optional<Int128> v = as_int128(x);
    if (!v) return false;
    x = from_int128((*v + step_ - 1) / step_ * step_);
  }
  const int to_cmp = compare(x, to);
  if (to_inclusive ? to_cmp > 0 : to_cmp >= 0) return false;
  if (!s.high) return true;
  const int high_cmp = compare(x, s.high->magnitude);
  return s.high->exclusive ? high_cmp < 0 : high_cmp <= 0;
}

bool JsonNumberRange::reachable(std::string_view text, bool integer_only) const {
  if (text.size() > kMaxChars) return false;
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view body = negative ? text.substr(1) : text;
  const size_t room = kMaxChars - text.size();
  if (body.empty()) {  // the first digit decides
    if (room == 0) return false;
    std::string next(text);
    next += '0';
    for (char d = '0'; d <= '9'; ++d) {
      next.back() = d;
      if (reachable(next, integer_only)) return true;
    }
    return false;
  }
  const Side s = side(negative);
  if (s.empty) return false;
  const size_t point = body.find('.');
  if (point != std::string_view::npos) {
    if (integer_only) return false;
    const Magnitude start = parse_magnitude(body);
    const size_t typed = body.size() - point - 1;  // fraction digits so far
    if (step_ > 0)  // only the integer itself, written with a point and zeros
      return start.fraction.empty() && reachable_magnitudes(s, start, start, true, 0);
    if (typed == 0) {  // a digit must follow
      if (room == 0) return false;
      return reachable_magnitudes(s, start, plus_unit(start, 0), false, room);
    }
    return reachable_magnitudes(s, start, plus_unit(start, typed), false, typed + room);
  }
  const Magnitude integer = parse_magnitude(body);
  if (is_zero(integer)) {  // "0": no more integer digits
    if (reachable_magnitudes(s, integer, integer, true, 0)) return true;
    return !integer_only && room >= 2 && reachable_magnitudes(s, integer, plus_unit(integer, 0), false, room - 1);
  }
  const Magnitude next = plus_unit(integer, 0);
  for (size_t j = 0; j <= room; ++j) {
    // j more integer digits, then (room - j - 1 after the point) fraction digits or none.
    const Magnitude from = times_pow10(integer, j);
    if (s.high && compare(from, s.high->magnitude) > 0) return false;  // longer ones start higher still
    const size_t fraction_digits = !integer_only && j + 2 <= room ? room - j - 1 : 0;
    if (reachable_magnitudes(s, from, times_pow10(next, j), false, fraction_digits)) return true;
  }
  return false;
}

bool JsonNumberRange::contains(std::string_view text) const {
  const bool negative = !text.empty() && text[0] == '-';
  const Magnitude m = parse_magnitude(negative ? text.substr(1) : text);
  const bool below_zero = negative && !is_zero(m);
  if (step_ > 0) {
    const std::optional<Int128> v = as_int128(m);
    if (!v || *v % step_ != 0) return false;
  }
  if (lower_) {
    const int c = compare_signed(below_zero, m, lower_->negative, lower_->magnitude);
    if (lower_->exclusive ? c <= 0 : c < 0) return false;
  }
  if (upper_) {
    const int c = compare_signed(below_zero, m, upper_->negative, upper_->magnitude);
    if (upper_->exclusive ? c >= 0 : c > 0) return false;
  }
  return true;
}

}  // namespace dsv4
