// RegexNfa: a recursive-descent parser of the pattern (code points) into a small syntax tree, then
// Thompson's construction over UTF-8 bytes (see regex_nfa.h).
#include "sampling/regex_nfa.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"

namespace dsv4 {

namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kSurrogateFirst = 0xD800, kSurrogateLast = 0xDFFF;
constexpr int kMaxGroupDepth = 256;  // bounds the parser's and the compiler's recursion

// A set of code points: sorted, disjoint, non-adjacent closed ranges.
using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;

CodeRanges normalized(CodeRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  return merged;
}

CodeRanges complement(const CodeRanges& set) {
  CodeRanges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : set) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

// The syntax tree: a set of characters, a sequence, alternatives, or a repeat of one child.
struct Node {
  enum class Kind { kSet, kConcat, kAlternation, kRepeat } kind = Kind::kConcat;
  CodeRanges set;              // kSet
  std::vector<int> children;   // kConcat, kAlternation; kRepeat: one
  int min = 0, max = 0;        // kRepeat; max < 0: unbounded
};

std::string offset_text(size_t at) { return "at offset " + std::to_string(at); }

[[noreturn]] void refuse(const std::string& what, size_t at) {
  throw UsageError("regex: " + what + " " + offset_text(at) + " is not supported");
}
[[noreturn]] void malformed(const std::string& what, size_t at) {
  throw UsageError("regex: " + what + " " + offset_text(at));
}

std::vector<char32_t> decode_utf8(std::string_view pattern) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < pattern.size();) {
    const auto b = static_cast<unsigned char>(pattern[i]);
    const int length = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || i + static_cast<size_t>(length) > pattern.size())
      throw UsageError("regex: the pattern is not valid UTF-8 at byte " + std::to_string(i));
    char32_t c = length == 1 ? b : b & (0x7F >> length);
    for (int k = 1; k < length; ++k) {
      const auto cont = static_cast<unsigned char>(pattern[i + static_cast<size_t>(k)]);
      if ((cont & 0xC0) != 0x80) throw UsageError("regex: the pattern is not valid UTF-8 at byte " + std::to_string(i));
      c = (c << 6) | (cont & 0x3F);
    }
    static constexpr char32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kLeast[length] || c > kMaxCodePoint || (c >= kSurrogateFirst && c <= kSurrogateLast))
      throw UsageError("regex: the pattern is not valid UTF-8 at byte " + std::to_string(i));
    out.push_back(c);
    i += static_cast<size_t>(length);
  }
  return out;
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_ascii_letter(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
int hex_value(char32_t c) {
  if (is_digit(c)) return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

// The pattern's syntax, parsed into nodes. Offsets in errors count code points from 0.
class Parser {
 public:
  explicit Parser(std::vector<char32_t> pattern) : p_(std::move(pattern)), end_(p_.size()) {
    // ^ first and $ last are no-ops: the whole output must match anyway. A final $ is an anchor
    // unless an odd number of backslashes escapes it.
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    if (end_ > pos_ && p_[end_ - 1] == '$') {
      size_t slashes = 0;
      while (end_ - 1 - slashes > pos_ && p_[end_ - 2 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) --end_;
    }
  }

  std::vector<Node> parse(int& root) {
    root = alternation(0);
    if (pos_ < end_) malformed("unbalanced ')'", pos_);
    return std::move(nodes_);
  }

 private:
  int add(Node node) {
    nodes_.push_back(std::move(node));
    return static_cast<int>(nodes_.size()) - 1;
  }
  int add_set(CodeRanges set) { return add(Node{Node::Kind::kSet, normalized(std::move(set)), {}, 0, 0}); }
  bool at(char32_t c) const { return pos_ < end_ && p_[pos_] == c; }

  int alternation(int depth) {
    Node alt{Node::Kind::kAlternation, {}, {concat(depth)}, 0, 0};
    while (at('|')) {
      ++pos_;
      alt.children.push_back(concat(depth));
    }
    return alt.children.size() == 1 ? alt.children[0] : add(std::move(alt));
  }

  int concat(int depth) {
    Node seq{Node::Kind::kConcat, {}, {}, 0, 0};
    while (pos_ < end_ && !at('|') && !at(')')) seq.children.push_back(repeat(depth));
    return add(std::move(seq));
  }

  // An atom and its quantifier, if any.
  int repeat(int depth) {
    const int atom_node = atom(depth);
    const size_t quantifier_at = pos_;
    int min = 0, max = 0;
    if (!quantifier(min, max)) return atom_node;
    // A lazy quantifier (`*?`) matches the same whole strings as a greedy one; a possessive one
    // (`*+`) does not, and a second quantifier is Python's "multiple repeat" error.
    if (at('?')) {
      ++pos_;
    } else if (at('+')) {
      refuse("the possessive quantifier '+' after the quantifier", quantifier_at);
    }
    int ignored_min = 0, ignored_max = 0;
    const size_t second_at = pos_;
    if (quantifier(ignored_min, ignored_max)) malformed("a repeated quantifier (multiple repeat)", second_at);
    return add(Node{Node::Kind::kRepeat, {}, {atom_node}, min, max});
  }

  // Reads `* + ? {n} {n,} {,m} {n,m}` at pos_ into [min, max] (max -1: unbounded); false, reading
  // nothing, when there is none (a `{` that begins no count is a literal, as in Python).
  bool quantifier(int& min, int& max) {
    if (at('*') || at('+') || at('?')) {
      min = at('+') ? 1 : 0;
      max = at('?') ? 1 : -1;
      ++pos_;
      return true;
    }
    if (!at('{')) return false;
    size_t i = pos_ + 1;
    const auto number = [&](int& value) {
      const size_t first = i;
      int64_t n = 0;
      while (i < end_ && is_digit(p_[i])) {
        n = std::min<int64_t>(n * 10 + (p_[i] - '0'), INT32_MAX);
        ++i;
      }
      value = static_cast<int>(n);
      return i > first;
    };
    int low = 0, high = 0;
    const bool has_low = number(low);
    bool has_comma = false, has_high = false;
    if (i < end_ && p_[i] == ',') {
      has_comma = true;
      ++i;
      has_high = number(high);
    }
    if (i >= end_ || p_[i] != '}' || (!has_low && !has_comma)) return false;
    const size_t open = pos_;
    pos_ = i + 1;
    min = has_low ? low : 0;
    max = has_comma ? (has_high ? high : -1) : min;
    for (const int count : {min, max})
      if (count > RegexNfa::kMaxRepeat)
        refuse("the count " + std::to_string(count) + " (above " + std::to_string(RegexNfa::kMaxRepeat) +
                   ") in the quantifier",
               open);
    if (max >= 0 && min > max) malformed("the quantifier's minimum is above its maximum", open);
    return true;
  }

  int atom(int depth) {
    const size_t start = pos_;
    const char32_t c = p_[pos_++];
    switch (c) {
      case '(':
        return group(start, depth);
      case '[':
        return add_set(char_class(start));
      case '.':
        return add_set({{0, '\n' - 1}, {'\n' + 1, kMaxCodePoint}});
      case '\\': {
        CodeRanges set;
        escape(start, /*in_class=*/false, set);
        return add_set(std::move(set));
      }
      case '*':
      case '+':
      case '?':
        malformed(std::string("nothing to repeat before '") + static_cast<char>(c) + "'", start);
      case '{': {
        --pos_;
        int min = 0, max = 0;
        if (quantifier(min, max)) malformed("nothing to repeat before '{'", start);
        ++pos_;
        return add_set({{c, c}});
      }
      case '^':
        refuse("the anchor '^' other than as the pattern's first character", start);
      case '$':
        refuse("the anchor '$' other than as the pattern's last character", start);
      default:
        return add_set({{c, c}});
    }
  }

  int group(size_t open, int depth) {
    if (depth >= kMaxGroupDepth) refuse("nesting groups deeper than " + std::to_string(kMaxGroupDepth), open);
    if (at('?')) {
      ++pos_;
      const auto next_is = [&](std::u32string_view s) {
        const auto here = p_.begin() + static_cast<std::ptrdiff_t>(pos_);
        return end_ - pos_ >= s.size() && std::equal(s.begin(), s.end(), here);
      };
      if (next_is(U":")) {
        ++pos_;
      } else if (next_is(U"P<") || (next_is(U"<") && !next_is(U"<=") && !next_is(U"<!"))) {
        pos_ += at('P') ? 2 : 1;  // a named group: the name does not matter to a whole match
        const size_t name_at = pos_;
        while (pos_ < end_ && (is_ascii_letter(p_[pos_]) || is_digit(p_[pos_]) || p_[pos_] == '_')) ++pos_;
        if (pos_ == name_at || !at('>')) malformed("a bad group name", name_at);
        ++pos_;
      } else if (next_is(U"=") || next_is(U"!")) {
        refuse("the lookahead '(?" + std::string(1, static_cast<char>(p_[pos_])) + "'", open);
      } else if (next_is(U"<=") || next_is(U"<!")) {
        refuse("the lookbehind '(?<" + std::string(1, static_cast<char>(p_[pos_ + 1])) + "'", open);
      } else if (next_is(U"P=")) {
        refuse("the named backreference '(?P='", open);
      } else if (next_is(U"#")) {
        refuse("the comment '(?#'", open);
      } else if (next_is(U">")) {
        refuse("the atomic group '(?>'", open);
      } else if (next_is(U"(")) {
        refuse("the conditional '(?('", open);
      } else {
        refuse("the inline flag group '(?...)'", open);
      }
    }
    const int inner = alternation(depth + 1);
    if (!at(')')) malformed("missing ')' for the group opened", open);
    ++pos_;
    return inner;
  }

  // [...] or [^...]: Python's rules (a ']' first is a literal, '-' first or last is a literal).
  CodeRanges char_class(size_t open) {
    const bool negated = at('^');
    if (negated) ++pos_;
    CodeRanges set;
    for (bool first = true;; first = false) {
      if (pos_ >= end_) malformed("missing ']' for the class opened", open);
      if (at(']') && !first) break;
      const size_t item_at = pos_;
      char32_t lo = 0;
      if (!class_item(set, lo)) continue;
      if (at('-') && pos_ + 1 < end_ && p_[pos_ + 1] != ']') {
        ++pos_;
        const size_t hi_at = pos_;
        char32_t hi = 0;
        if (!class_item(set, hi)) malformed("a range ending in a class escape", hi_at);
        if (hi < lo) malformed("a range whose end is below its start", item_at);
        set.emplace_back(lo, hi);
      } else {
        set.emplace_back(lo, lo);
      }
    }
    ++pos_;
    set = normalized(std::move(set));
    return negated ? complement(set) : set;
  }

  // One item of a class: a character (true, in `c`) or an escape for a set (false, added to set).
  bool class_item(CodeRanges& set, char32_t& c) {
    const size_t start = pos_;
    if (p_[pos_++] != '\\') {
      c = p_[start];
      return true;
    }
    CodeRanges escaped;
    if (escape(start, /*in_class=*/true, escaped)) {
      c = escaped[0].first;
      return true;
    }
    set.insert(set.end(), escaped.begin(), escaped.end());
    return false;
  }

  // The escape whose backslash is at `slash` (pos_ just after it), as a set of characters; true
  // when it stands for one character (\n, \x41, \.), false for a class escape (\d, \W).
  bool escape(size_t slash, bool in_class, CodeRanges& set) {
    if (pos_ >= end_) malformed("a trailing backslash", slash);
    const char32_t c = p_[pos_++];
    static const CodeRanges kDigit = {{'0', '9'}};
    static const CodeRanges kWord = normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
    static const CodeRanges kSpace = normalized({{'\t', '\r'}, {' ', ' '}});
    const auto single = [&](char32_t v) {
      set = {{v, v}};
      return true;
    };
    switch (c) {
      case 'd': set = kDigit; return false;
      case 'D': set = complement(kDigit); return false;
      case 'w': set = kWord; return false;
      case 'W': set = complement(kWord); return false;
      case 's': set = kSpace; return false;
      case 'S': set = complement(kSpace); return false;
      case 'n': return single('\n');
      case 't': return single('\t');
      case 'r': return single('\r');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case 'a': return single('\a');
      case '0': {
        char32_t v = 0;  // \0 and up to two more octal digits
        for (int k = 0; k < 2 && pos_ < end_ && p_[pos_] >= '0' && p_[pos_] <= '7'; ++k) v = v * 8 + (p_[pos_++] - '0');
        return single(v);
      }
      case 'x': return single(hex_escape(slash, 2));
      case 'u':
      case 'U': {
        char32_t v = hex_escape(slash, c == 'u' ? 4 : 8);
        // A high surrogate escape followed by a low one is one character (as JSON writes them).
        if (v >= 0xD800 && v <= 0xDBFF && end_ - pos_ >= 6 && p_[pos_] == '\\' && p_[pos_ + 1] == 'u') {
          const size_t low_at = pos_;
          pos_ += 2;
          const char32_t low = hex_escape(low_at, 4);
          if (low < 0xDC00 || low > 0xDFFF) malformed("a high surrogate escape without its low surrogate", slash);
          v = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
        }
        if ((v >= kSurrogateFirst && v <= kSurrogateLast) || v > kMaxCodePoint)
          malformed("an escape of a lone surrogate or beyond U+10FFFF", slash);
        return single(v);
      }
      case 'b':
        if (in_class) return single('\b');
        refuse("the word boundary '\\b'", slash);
      case 'B': refuse("the assertion '\\B'", slash);
      case 'A': refuse("the anchor '\\A'", slash);
      case 'Z':
      case 'z': refuse(std::string("the anchor '\\") + static_cast<char>(c) + "'", slash);
      case 'G': refuse("the anchor '\\G'", slash);
      case 'p':
      case 'P': refuse(std::string("the Unicode property '\\") + static_cast<char>(c) + "'", slash);
      case 'k': refuse("the named backreference '\\k'", slash);
      default:
        if (c >= '1' && c <= '9') refuse("the backreference '\\" + std::string(1, static_cast<char>(c)) + "'", slash);
        if (is_ascii_letter(c)) malformed("the unknown escape '\\" + std::string(1, static_cast<char>(c)) + "'", slash);
        return single(c);  // an escaped metacharacter or other symbol stands for itself
    }
  }

  char32_t hex_escape(size_t slash, int digits) {
    char32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const int h = pos_ < end_ ? hex_value(p_[pos_]) : -1;
      if (h < 0) malformed("an escape needing " + std::to_string(digits) + " hex digits", slash);
      v = v * 16 + static_cast<char32_t>(h);
      ++pos_;
    }
    return v;
  }

  std::vector<char32_t> p_;
  size_t pos_ = 0;
  size_t end_;
  std::vector<Node> nodes_;
};

// The UTF-8 byte ranges of one code point range: sequences of per-byte ranges whose product is
// exactly the range's encodings (the split of Rust's regex-syntax utf8 module).
void utf8_sequences(char32_t lo, char32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  static constexpr char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (const char32_t end : kLengthEnds)
    if (lo <= end && hi > end) {
      utf8_sequences(lo, end, out);
      utf8_sequences(end + 1, hi, out);
      return;
    }
  const int length = hi <= 0x7F ? 1 : hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < length; ++i) {
    const char32_t mask = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        utf8_sequences(lo, lo | mask, out);
        utf8_sequences((lo | mask) + 1, hi, out);
        return;
      }
      if ((hi & mask) != mask) {
        utf8_sequences(lo, (hi & ~mask) - 1, out);
        utf8_sequences(hi & ~mask, hi, out);
        return;
      }
    }
  }
  const auto encode = [length](char32_t c, std::array<uint8_t, 4>& bytes) {
    if (length == 1) {
      bytes[0] = static_cast<uint8_t>(c);
      return;
    }
    static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int k = length - 1; k > 0; --k, c >>= 6)
      bytes[static_cast<size_t>(k)] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    bytes[0] = static_cast<uint8_t>(kLead[length] | c);
  };
  std::array<uint8_t, 4> a{}, b{};
  encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> sequence;
  for (size_t k = 0; k < static_cast<size_t>(length); ++k) sequence.emplace_back(a[k], b[k]);
  out.push_back(std::move(sequence));
}

}  // namespace

// Thompson's construction, each node compiled in front of the state that follows it.
class RegexCompiler {
 public:
  RegexCompiler(const std::vector<Node>& nodes, RegexNfa& nfa) : nodes_(nodes), nfa_(nfa) {}

  // A new state (kMaxStates bounds the expansion of repeats).
  int32_t add(RegexNfa::State state) {
    if (nfa_.states_.size() >= RegexNfa::kMaxStates)
      throw UsageError("regex: the pattern compiles to more than " + std::to_string(RegexNfa::kMaxStates) +
                       " automaton states (repeats expanded); use smaller counts");
    nfa_.states_.push_back(state);
    return static_cast<int32_t>(nfa_.states_.size()) - 1;
  }
  int32_t split(int32_t a, int32_t b) { return add({RegexNfa::State::Kind::kSplit, 0, 0, a, b}); }

  // The start of `node`'s automaton, which goes on to `next`.
  int32_t compile(int node, int32_t next) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    switch (n.kind) {
      case Node::Kind::kSet:
        return set(n.set, next);
      case Node::Kind::kConcat:
        for (auto child = n.children.rbegin(); child != n.children.rend(); ++child) next = compile(*child, next);
        return next;
      case Node::Kind::kAlternation: {
        int32_t start = compile(n.children.back(), next);
        for (size_t k = n.children.size() - 1; k-- > 0;) start = split(compile(n.children[k], next), start);
        return start;
      }
      case Node::Kind::kRepeat: {
        const int child = n.children[0];
        int32_t tail = next;
        if (n.max < 0) {  // a loop: the split takes one more round or leaves
          const int32_t loop = split(RegexNfa::kNone, next);
          nfa_.states_[static_cast<size_t>(loop)].out = compile(child, loop);
          tail = loop;
        } else {  // max - min nested optional rounds
          for (int k = n.min; k < n.max; ++k) tail = split(compile(child, tail), next);
        }
        for (int k = 0; k < n.min; ++k) tail = compile(child, tail);
        return tail;
      }
    }
    return next;
  }

 private:
  int32_t set(const CodeRanges& ranges, int32_t next) {
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> sequences;
    for (const auto& [lo, hi] : ranges) {
      if (lo < kSurrogateFirst && hi > kSurrogateLast) {
        utf8_sequences(lo, kSurrogateFirst - 1, sequences);
        utf8_sequences(kSurrogateLast + 1, hi, sequences);
      } else if (hi < kSurrogateFirst || lo > kSurrogateLast) {
        utf8_sequences(lo, hi, sequences);
      } else if (lo < kSurrogateFirst) {
        utf8_sequences(lo, kSurrogateFirst - 1, sequences);
      } else if (hi > kSurrogateLast) {
        utf8_sequences(kSurrogateLast + 1, hi, sequences);
      }
    }
    int32_t start = RegexNfa::kNone;  // an empty set (as [^\s\S]) matches nothing: a split to nowhere
    for (auto sequence = sequences.rbegin(); sequence != sequences.rend(); ++sequence) {
      int32_t chain = next;
      for (auto byte = sequence->rbegin(); byte != sequence->rend(); ++byte)
        chain = add({RegexNfa::State::Kind::kByteRange, byte->first, byte->second, chain, RegexNfa::kNone});
      start = start == RegexNfa::kNone ? chain : split(chain, start);
    }
    return start == RegexNfa::kNone ? split(RegexNfa::kNone, RegexNfa::kNone) : start;
  }

  const std::vector<Node>& nodes_;
  RegexNfa& nfa_;
};

RegexNfa RegexNfa::compile(std::string_view pattern) {
  int root = 0;
  const std::vector<Node> nodes = Parser(decode_utf8(pattern)).parse(root);
  RegexNfa nfa;
  RegexCompiler compiler(nodes, nfa);
  const int32_t match = compiler.add({State::Kind::kMatch, 0, 0, kNone, kNone});
  nfa.start_ = compiler.compile(root, match);
  // Byte classes: a new class begins at every range's first byte and after its last.
  std::array<bool, 257> begins{};
  begins[0] = true;
  for (const State& s : nfa.states_)
    if (s.kind == State::Kind::kByteRange) {
      begins[s.lo] = true;
      begins[static_cast<size_t>(s.hi) + 1] = true;
    }
  int cls = -1;
  for (size_t b = 0; b < 256; ++b) {
    cls += begins[b];
    nfa.byte_class_[b] = static_cast<uint8_t>(cls);
  }
  nfa.num_byte_classes_ = cls + 1;
  return nfa;
}

std::vector<int32_t> RegexNfa::closure(std::span<const int32_t> from) const {
  std::vector<int32_t> out;
  std::vector<bool> seen(states_.size());
  std::vector<int32_t> stack(from.begin(), from.end());
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (s == kNone || seen[static_cast<size_t>(s)]) continue;
    seen[static_cast<size_t>(s)] = true;
    const State& state = states_[static_cast<size_t>(s)];
    if (state.kind == State::Kind::kSplit) {
      stack.push_back(state.out1);
      stack.push_back(state.out);
    } else {
      out.push_back(s);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int32_t> RegexNfa::step(std::span<const int32_t> set, uint8_t byte) const {
  std::vector<int32_t> next;
  for (const int32_t s : set) {
    const State& state = states_[static_cast<size_t>(s)];
    if (state.kind == State::Kind::kByteRange && byte >= state.lo && byte <= state.hi) next.push_back(state.out);
  }
  return next.empty() ? next : closure(next);
}

bool RegexNfa::accepts(std::span<const int32_t> set) const {
  return std::any_of(set.begin(), set.end(), [&](int32_t s) {
    return states_[static_cast<size_t>(s)].kind == State::Kind::kMatch;
  });
}

bool RegexNfa::full_match(std::string_view text) const {
  const int32_t from = start_;
  std::vector<int32_t> set = closure(std::span(&from, 1));
  for (const char c : text) {
    set = step(set, static_cast<uint8_t>(c));
    if (set.empty()) return false;
  }
  return accepts(set);
}

}  // namespace dsv4
