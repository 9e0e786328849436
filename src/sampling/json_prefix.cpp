// JsonObjectPrefix: JSON's grammar as a pushdown automaton over bytes, the stack of open
// containers kept as one bit per level.
#include "sampling/json_prefix.h"

namespace dsv4 {

namespace {

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

bool is_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonObjectPrefix::advance(char byte) {
  JsonObjectPrefix next = *this;
  if (!next.step(byte)) return false;
  *this = next;
  return true;
}

bool JsonObjectPrefix::advance(std::string_view bytes) {
  for (char byte : bytes)
    if (!step(byte)) return false;
  return true;
}

// One byte; on false the state may be left partway (advance(char) steps a copy).
bool JsonObjectPrefix::step(char byte) {
  const bool in_string = mode_ == Mode::kString || mode_ == Mode::kEscape || mode_ == Mode::kUnicodeEscape ||
                         mode_ == Mode::kLowBackslash || mode_ == Mode::kLowU;
  const bool spacing = !in_string && is_whitespace(byte);
  if (spacing && whitespace_run_ == kMaxWhitespaceRun) return false;
  if (!transition(byte)) return false;
  whitespace_run_ = spacing ? static_cast<uint8_t>(whitespace_run_ + 1) : 0;
  return true;
}

// JSON's grammar for one byte.
bool JsonObjectPrefix::transition(char byte) {
  switch (mode_) {
    case Mode::kStart:
      if (is_whitespace(byte)) return true;
      return byte == '{' && open(false);
    case Mode::kKeyOrObjectEnd:
      if (byte == '}') return close(false);
      [[fallthrough]];
    case Mode::kKey:
      if (is_whitespace(byte)) return true;
      if (byte != '"') return false;
      mode_ = Mode::kString;
      key_ = true;
      return true;
    case Mode::kColon:
      if (is_whitespace(byte)) return true;
      if (byte != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kValueOrArrayEnd:
      if (byte == ']') return close(true);
      [[fallthrough]];
    case Mode::kValue:
      if (is_whitespace(byte)) return true;
      return begin_value(byte);
    case Mode::kAfterValue:
      return after_value(byte);
    case Mode::kString:
      if (byte == '"') {
        if (key_) {
          mode_ = Mode::kColon;
        } else {
          end_value();
        }
        return true;
      }
      if (byte == '\\') {
        mode_ = Mode::kEscape;
        return true;
      }
      return static_cast<unsigned char>(byte) >= 0x20;
    case Mode::kEscape:
      if (byte == 'u') {
        mode_ = Mode::kUnicodeEscape;
        escape_ = Escape::kAny;
        pending_ = 4;
        return true;
      }
      if (std::string_view("\"\\/bfnrt").find(byte) == std::string_view::npos) return false;
      mode_ = Mode::kString;
      return true;
    case Mode::kUnicodeEscape:
      return unicode_digit(byte);
    case Mode::kLowBackslash:
      if (byte != '\\') return false;
      mode_ = Mode::kLowU;
      return true;
    case Mode::kLowU:
      if (byte != 'u') return false;
      mode_ = Mode::kUnicodeEscape;
      escape_ = Escape::kMustBeLow;
      pending_ = 4;
      return true;
    case Mode::kMinus:
      if (!is_digit(byte)) return false;
      mode_ = byte == '0' ? Mode::kZero : Mode::kInteger;
      return true;
    case Mode::kInteger:
      if (is_digit(byte)) return true;
      [[fallthrough]];
    case Mode::kZero:
      if (byte == '.') {
        mode_ = Mode::kDot;
        return true;
      }
      [[fallthrough]];
    case Mode::kFraction:
      if (mode_ == Mode::kFraction && is_digit(byte)) return true;
      if (byte == 'e' || byte == 'E') {
        mode_ = Mode::kExponent;
        return true;
      }
      end_value();
      return after_value(byte);
    case Mode::kDot:
      if (!is_digit(byte)) return false;
      mode_ = Mode::kFraction;
      return true;
    case Mode::kExponent:
      if (byte == '+' || byte == '-') {
        mode_ = Mode::kExponentSign;
        return true;
      }
      [[fallthrough]];
    case Mode::kExponentSign:
      if (!is_digit(byte)) return false;
      mode_ = Mode::kExponentDigits;
      return true;
    case Mode::kExponentDigits:
      if (is_digit(byte)) return true;
      end_value();
      return after_value(byte);
    case Mode::kLiteral: {
      const std::string_view literal = kLiterals[literal_];
      if (byte != literal[pending_]) return false;
      if (++pending_ == literal.size()) end_value();
      return true;
    }
    case Mode::kComplete:
      return false;
  }
  return false;
}

// A hex digit of \uXXXX. The first two digits tell a surrogate: D8-DB high, DC-DF low.
bool JsonObjectPrefix::unicode_digit(char byte) {
  if (!is_hex_digit(byte)) return false;
  const bool d = byte == 'd' || byte == 'D';
  const bool c_to_f = (byte >= 'c' && byte <= 'f') || (byte >= 'C' && byte <= 'F');
  if (pending_ == 4) {
    if (escape_ == Escape::kMustBeLow && !d) return false;
    if (escape_ == Escape::kAny && d) escape_ = Escape::kFirstD;
  } else if (pending_ == 3) {
    if (escape_ == Escape::kMustBeLow && !c_to_f) return false;
    if (escape_ == Escape::kFirstD) {
      if (c_to_f) return false;  // a low surrogate alone
      escape_ = is_digit(byte) && byte < '8' ? Escape::kAny : Escape::kHigh;
    }
  }
  if (--pending_ == 0) mode_ = escape_ == Escape::kHigh ? Mode::kLowBackslash : Mode::kString;
  return true;
}

// The first byte of a value, after any whitespace.
bool JsonObjectPrefix::begin_value(char byte) {
  switch (byte) {
    case '"':
      mode_ = Mode::kString;
      key_ = false;
      return true;
    case '{': return open(false);
    case '[': return open(true);
    case '-': mode_ = Mode::kMinus; return true;
    case '0': mode_ = Mode::kZero; return true;
    case 't': case 'f': case 'n':
      mode_ = Mode::kLiteral;
      literal_ = byte == 't' ? 0 : byte == 'f' ? 1 : 2;
      pending_ = 1;
      return true;
    default:
      if (!is_digit(byte)) return false;
      mode_ = Mode::kInteger;
      return true;
  }
}

// A byte after a complete value inside a container.
bool JsonObjectPrefix::after_value(char byte) {
  if (is_whitespace(byte)) return true;
  if (byte == ',') {
    mode_ = in_array() ? Mode::kValue : Mode::kKey;
    return true;
  }
  if (byte == '}' || byte == ']') return close(byte == ']');
  return false;
}

bool JsonObjectPrefix::open(bool array) {
  if (depth_ == kMaxDepth) return false;
  const uint64_t bit = uint64_t{1} << depth_;
  arrays_ = array ? arrays_ | bit : arrays_ & ~bit;
  ++depth_;
  mode_ = array ? Mode::kValueOrArrayEnd : Mode::kKeyOrObjectEnd;
  return true;
}

bool JsonObjectPrefix::close(bool array) {
  if (depth_ == 0 || in_array() != array) return false;
  --depth_;
  end_value();
  return true;
}

// A value (or a container) has ended: the enclosing container goes on, or the document is whole.
void JsonObjectPrefix::end_value() { mode_ = depth_ == 0 ? Mode::kComplete : Mode::kAfterValue; }

}  // namespace dsv4
