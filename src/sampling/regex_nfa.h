// A regular expression compiled to a byte-level NFA, for the regex output constraint (vLLM's
// guided_regex, structured_outputs.regex; regex_prefix.h advances it token by token). The pattern
// is the practical subset of Python's `re` (and JSON Schema's `pattern`) that guided-decoding
// users send: literals, escapes (\d \w \s \D \W \S ASCII-only, \n \t \r \f \v \0 \xHH \uXXXX
// \UXXXXXXXX, escaped metacharacters), `.` (any character but newline), classes `[a-z_]`, `[^...]`,
// groups `(...)`, `(?:...)`, `(?P<name>...)`, `(?<name>...)`, alternation, the quantifiers
// `* + ? {n} {n,} {,m} {n,m}` (counts up to kMaxRepeat; a lazy one, `*?`, matches the same whole
// strings as the greedy one), and `^` / `$` as the pattern's first / last character (the whole
// output must match anyway). Everything else (backreferences, lookarounds, possessive quantifiers,
// atomic groups, inline flags, \b, \A, \p{..}) is refused with a UsageError naming the construct
// and its offset (in characters) in the pattern.
//
// Hand-written rather than taken from PCRE2 (a dependency already): PCRE2 can tell whether a whole
// string is a partial match, but exposes no automaton state to advance byte by byte, and the mask
// needs a step per byte of every vocabulary token (129k of them) at every decode step.
//
// Characters are Unicode code points; each class is compiled to the UTF-8 byte sequences of its
// code points (surrogates excluded), so the automaton accepts whole characters only: a prefix may
// end inside a character (a token can), a match cannot.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace dsv4 {

class RegexNfa {
 public:
  static constexpr int kMaxRepeat = 1000;        // the largest count of a {n,m} quantifier
  static constexpr size_t kMaxStates = 200'000;  // the largest automaton (repeats expanded) compiled

  // Throws UsageError naming the unsupported or malformed construct and its offset.
  static RegexNfa compile(std::string_view pattern);

  // A state of the automaton. kByteRange consumes one byte in [lo, hi] and goes to `out`;
  // kSplit goes to `out` and `out1` without consuming (out1 may be kNone), kMatch accepts.
  static constexpr int32_t kNone = -1;
  struct State {
    enum class Kind : uint8_t { kByteRange, kSplit, kMatch } kind = Kind::kSplit;
    uint8_t lo = 0, hi = 0;
    int32_t out = kNone, out1 = kNone;
  };

  // The sorted states (kByteRange and kMatch only) reachable without consuming a byte from
  // `from`: the automaton's position before any byte (from = {start()}) or after one.
  std::vector<int32_t> closure(std::span<const int32_t> from) const;
  // The closure of the states a byte leads to from `set` (empty when no state takes it).
  std::vector<int32_t> step(std::span<const int32_t> set, uint8_t byte) const;
  bool accepts(std::span<const int32_t> set) const;

  int32_t start() const { return start_; }
  size_t num_states() const { return states_.size(); }
  // Bytes no state tells apart share a class: a transition table needs a column per class only.
  const std::array<uint8_t, 256>& byte_class() const { return byte_class_; }
  int num_byte_classes() const { return num_byte_classes_; }

  // Whether `text` as a whole matches (for tests and the JSON schema's pattern check).
  bool full_match(std::string_view text) const;

 private:
  friend class RegexCompiler;
  std::vector<State> states_;
  int32_t start_ = kNone;
  std::array<uint8_t, 256> byte_class_{};
  int num_byte_classes_ = 1;
};

}  // namespace dsv4
