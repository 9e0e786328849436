// JSON Schema's `format` for the string formats of fixed shape that generated objects most often
// carry (pydantic writes them for date, time, datetime and UUID fields): a byte-level cursor that
// says whether a string's characters so far can still be such a value and whether they are one.
//
// date: RFC 3339 full-date, YYYY-MM-DD with the month's real length (February 29 in leap years
// only). time: RFC 3339 full-time, HH:MM:SS, optional fraction, then Z or an offset +HH:MM / -HH:MM
// (seconds up to 59: a leap second is refused). date-time: a date, 'T', a time. uuid: 8-4-4-4-12
// hexadecimal digits. The cursor takes the upper-case forms only ('T', 'Z'), a subset of what
// RFC 3339 allows that every validator takes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class StringFormat : uint8_t { kNone, kDate, kTime, kDateTime, kUuid };

// The format a schema's "format" names, or nullopt for one the cursor does not follow.
std::optional<StringFormat> string_format_named(std::string_view name);

// The formats checked as a whole match of a regex_nfa.h pattern instead, the pattern for `name`,
// or nullopt for a format not checked at all (uri, duration, ...):
// - email: a dot-atom local part of letters, digits and _ % + - (no leading, trailing or doubled
//   dot), '@', then a domain of RFC 1123 labels (letters, digits, inner hyphens, up to 63
//   characters) ending in a top-level label of 2 to 63 letters: addresses that pydantic's
//   email-validator and jsonschema's checker both take (the local part's 64 and the address's 254
//   characters are not bounded);
// - ipv4: four dotted decimal octets 0-255 without leading zeros;
// - ipv6: eight groups of 1-4 hexadecimal digits, or fewer around one "::" (no embedded IPv4 form);
// - hostname: dot-separated RFC 1123 labels (the name's 253 characters are not bounded).
std::optional<std::string_view> string_format_pattern(std::string_view name);

class StringFormatCursor {
 public:
  StringFormatCursor() = default;
  explicit StringFormatCursor(StringFormat format) : format_(format) {}

  // Whether `byte` can come next (the cursor moves past it if so).
  bool advance(char byte);
  // The characters so far are a whole value (always, for kNone).
  bool complete() const;
  // A format is being followed (not kNone).
  bool active() const { return format_ != StringFormat::kNone; }

 private:
  bool date_byte(char byte, int at);
  bool time_byte(char byte);
  bool uuid_byte(char byte) const;

  // Where the time part is: the fixed HH:MM:SS, the fraction's digits, an offset's HH:MM, done.
  enum class TimeStage : uint8_t { kClock, kFractionFirst, kFraction, kOffset, kDone };

  StringFormat format_ = StringFormat::kNone;
  uint8_t at_ = 0;        // characters of the fixed part (the date, then the clock) taken
  uint8_t offset_at_ = 0;  // characters of an offset's HH:MM taken
  TimeStage time_ = TimeStage::kClock;
  uint16_t year_ = 0;
  uint8_t month_ = 0;
  uint8_t tens_ = 0;  // the tens digit of the field being read (day, hour)
};

}  // namespace dsv4
