// A byte-level checker of JSON text as it is generated: the state after a prefix, advanced one
// byte at a time, that says whether the bytes so far can still be the start of one JSON object
// (RFC 8259 syntax with an object at the top) and whether that object has closed. It is what
// response_format json_object constrains the output with (json_token_mask.h).
//
// Whitespace (space, tab, newline, carriage return) is allowed before the object and between
// tokens, up to kMaxWhitespaceRun bytes in a row (room for any usual indentation, while a model
// cannot stall in whitespace for ever), never after the object has closed.
//
// Strings take any byte >= 0x20 but '"' and '\' as it is (UTF-8 is not checked: a broken
// sequence decodes to U+FFFD, which is still valid JSON), and the escapes \" \\ \/ \b \f \n \r \t
// and \uXXXX, where a high surrogate (\uD800-\uDBFF) must be followed by a low one
// (\uDC00-\uDFFF) and a low one must not come alone, so that strict parsers take the text too;
// control bytes < 0x20 are refused in them. Numbers follow JSON's grammar (-0.5e+3; no leading
// zeros, '+', or bare '.'), with no bound on their size. Nesting is limited to kMaxDepth
// containers, the top-level object included, so the state is a few trivially copyable bytes
// that a caller can copy per candidate token.
#pragma once

#include <cstdint>
#include <string_view>

namespace dsv4 {

// Whether a byte of a string begins a character (a code point): any byte but a UTF-8
// continuation. JSON Schema's string lengths count these (an escape's backslash begins one).
inline bool begins_character(char byte) { return (static_cast<uint8_t>(byte) & 0xC0) != 0x80; }

class JsonObjectPrefix {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxWhitespaceRun = 64;

  // Whether `byte` can follow the prefix. When it can, the state moves past it; when it cannot,
  // the state is unchanged.
  bool advance(char byte);
  // Whether all of `bytes` can follow, advancing over them one by one. On false the state is
  // left partway and should be dropped (callers try bytes on a copy).
  bool advance(std::string_view bytes);

  // The top-level object has closed: no byte can follow any more.
  bool complete() const { return mode_ == Mode::kComplete; }

  // Inside a string, not in an escape: every byte >= 0x20 but '"' and '\' can follow and leaves
  // the state as it is.
  bool in_plain_string() const { return mode_ == Mode::kString; }
  // How many characters of such bytes may still follow here (JsonSchemaPrefix's form; no bound
  // without a schema), or -1 outside a plain string.
  int64_t plain_string_room() const { return in_plain_string() ? INT64_MAX : -1; }

  // The same state, field for field (tests check that a refused byte leaves it unchanged).
  bool operator==(const JsonObjectPrefix&) const = default;

 private:
  friend class JsonSchemaPrefix;  // reads the modes to follow values, keys and containers

  // What the \uXXXX escape being read may still be.
  enum class Escape : uint8_t {
    kAny,        // a character outside the surrogates
    kFirstD,     // its first digit was D: the second decides
    kHigh,       // a high surrogate: a low one must follow
    kMustBeLow,  // the escape after a high surrogate
  };
  enum class Mode : uint8_t {
    kStart,            // before the top-level object: whitespace or '{'
    kKeyOrObjectEnd,   // after '{': a key or '}'
    kKey,              // after ',' in an object: a key
    kColon,            // after a key
    kValue,            // after ':' or after ',' in an array
    kValueOrArrayEnd,  // after '['
    kAfterValue,       // after a value inside a container: ',' or the container's end
    kString,           // inside a string (key_ says which kind)
    kEscape,           // after '\' in a string
    kUnicodeEscape,    // in the hex digits of \uXXXX (pending_ of them still to come)
    kLowBackslash,     // after a high surrogate's \uXXXX: the '\' of the low one
    kLowU,             // the 'u' of the low surrogate's escape
    kMinus,            // '-': a digit must follow
    kZero,             // an integer part of "0": no more digits
    kInteger,          // in the digits of an integer part that started with 1-9
    kDot,              // '.': a digit must follow
    kFraction,         // in the fraction's digits
    kExponent,         // 'e' or 'E': a sign or a digit must follow
    kExponentSign,     // the exponent's sign: a digit must follow
    kExponentDigits,   // in the exponent's digits
    kLiteral,          // in true, false or null (literal_ and pending_ say where)
    kComplete,         // the top-level object has closed
  };

  bool step(char byte);
  bool transition(char byte);
  bool unicode_digit(char byte);
  bool begin_value(char byte);
  bool after_value(char byte);
  bool open(bool array);
  bool close(bool array);
  void end_value();
  bool in_array() const { return (arrays_ >> (depth_ - 1)) & 1u; }

  uint64_t arrays_ = 0;           // bit i: the container at depth i + 1 is an array (else an object)
  uint8_t depth_ = 0;             // open containers
  uint8_t whitespace_run_ = 0;    // whitespace bytes in a row outside strings
  Mode mode_ = Mode::kStart;
  bool key_ = false;              // in a string: it is an object key
  Escape escape_ = Escape::kAny;  // kUnicodeEscape: what the escape may still be
  uint8_t literal_ = 0;           // kLiteral: which of true, false, null
  uint8_t pending_ = 0;           // kUnicodeEscape: hex digits left; kLiteral: letters matched
};

}  // namespace dsv4
