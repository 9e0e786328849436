// StringFormatCursor: the fixed shapes of date, time, date-time and uuid, a character at a time
// (see the header).
#include "sampling/json_string_format.h"

namespace dsv4 {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

int days_in(int month, int year) {
  static constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[month - 1];
}

// A two-digit field of values [low, high] (high up to 99): whether `c` can be its tens digit, or
// (with the tens known) its units digit.
bool tens_ok(char c, int low, int high) { return is_digit(c) && (c - '0') * 10 + 9 >= low && (c - '0') * 10 <= high; }
bool units_ok(char c, int tens, int low, int high) {
  return is_digit(c) && tens * 10 + (c - '0') >= low && tens * 10 + (c - '0') <= high;
}

constexpr int kMaxFractionDigits = 6;  // microseconds: what every validator's parser takes

}  // namespace

std::optional<StringFormat> string_format_named(std::string_view name) {
  if (name == "date") return StringFormat::kDate;
  if (name == "time") return StringFormat::kTime;
  if (name == "date-time") return StringFormat::kDateTime;
  if (name == "uuid") return StringFormat::kUuid;
  return std::nullopt;
}

std::optional<std::string_view> string_format_pattern(std::string_view name) {
#define DSV4_LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define DSV4_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define DSV4_HEX "[0-9a-fA-F]{1,4}"
  static constexpr std::string_view kEmail =
      "[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@(" DSV4_LABEL "\\.)+[A-Za-z]{2,63}";
  static constexpr std::string_view kIpv4 = DSV4_OCTET "(\\." DSV4_OCTET "){3}";
  static constexpr std::string_view kIpv6 =
      "(" DSV4_HEX ":){7}" DSV4_HEX "|(" DSV4_HEX ":){1,7}:|(" DSV4_HEX ":){1,6}:" DSV4_HEX "|(" DSV4_HEX
      ":){1,5}(:" DSV4_HEX "){1,2}|(" DSV4_HEX ":){1,4}(:" DSV4_HEX "){1,3}|(" DSV4_HEX ":){1,3}(:" DSV4_HEX
      "){1,4}|(" DSV4_HEX ":){1,2}(:" DSV4_HEX "){1,5}|" DSV4_HEX ":(:" DSV4_HEX "){1,6}|:(:" DSV4_HEX "){1,7}|::";
  static constexpr std::string_view kHostname = DSV4_LABEL "(\\." DSV4_LABEL ")*";
#undef DSV4_LABEL
#undef DSV4_OCTET
#undef DSV4_HEX
  if (name == "email") return kEmail;
  if (name == "ipv4") return kIpv4;
  if (name == "ipv6") return kIpv6;
  if (name == "hostname") return kHostname;
  return std::nullopt;
}

bool StringFormatCursor::advance(char byte) {
  switch (format_) {
    case StringFormat::kNone: return true;
    case StringFormat::kUuid:
      if (at_ >= 36 || !uuid_byte(byte)) return false;
      ++at_;
      return true;
    case StringFormat::kDate:
      if (at_ >= 10 || !date_byte(byte, at_)) return false;
      ++at_;
      return true;
    case StringFormat::kDateTime:
      if (at_ < 10) {
        if (!date_byte(byte, at_)) return false;
        ++at_;
        return true;
      }
      if (at_ == 10) {
        if (byte != 'T') return false;
        ++at_;
        return true;
      }
      return time_byte(byte);
    case StringFormat::kTime: return time_byte(byte);
  }
  return false;
}

bool StringFormatCursor::complete() const {
  switch (format_) {
    case StringFormat::kNone: return true;
    case StringFormat::kUuid: return at_ == 36;
    case StringFormat::kDate: return at_ == 10;
    case StringFormat::kTime:
    case StringFormat::kDateTime: return time_ == TimeStage::kDone;
  }
  return false;
}

bool StringFormatCursor::uuid_byte(char byte) const {
  return at_ == 8 || at_ == 13 || at_ == 18 || at_ == 23 ? byte == '-' : is_hex(byte);
}

// Character `at` of YYYY-MM-DD (year 0001-9999).
bool StringFormatCursor::date_byte(char byte, int at) {
  switch (at) {
    case 0: case 1: case 2: case 3:
      if (!is_digit(byte)) return false;
      year_ = static_cast<uint16_t>(year_ * 10 + (byte - '0'));
      return at < 3 || year_ > 0;
    case 4: case 7: return byte == '-';
    case 5:
      if (!tens_ok(byte, 1, 12)) return false;
      tens_ = static_cast<uint8_t>(byte - '0');
      return true;
    case 6:
      if (!units_ok(byte, tens_, 1, 12)) return false;
      month_ = static_cast<uint8_t>(tens_ * 10 + (byte - '0'));
      return true;
    case 8:
      if (!tens_ok(byte, 1, days_in(month_, year_))) return false;
      tens_ = static_cast<uint8_t>(byte - '0');
      return true;
    case 9: return units_ok(byte, tens_, 1, days_in(month_, year_));
    default: return false;
  }
}

// A character of HH:MM:SS[.fraction](Z|+HH:MM|-HH:MM).
bool StringFormatCursor::time_byte(char byte) {
  const auto offset_or_end = [&] {
    if (byte == 'Z') return time_ = TimeStage::kDone, true;
    if (byte == '+' || byte == '-') return time_ = TimeStage::kOffset, offset_at_ = 0, true;
    return false;
  };
  switch (time_) {
    case TimeStage::kClock: {
      const int c = at_ - (format_ == StringFormat::kDateTime ? 11 : 0);
      bool ok = false;
      switch (c) {
        case 0: case 3: case 6:
          ok = tens_ok(byte, 0, c == 0 ? 23 : 59);
          tens_ = static_cast<uint8_t>(byte - '0');
          break;
        case 1: case 4: case 7: ok = units_ok(byte, tens_, 0, c == 1 ? 23 : 59); break;
        case 2: case 5: ok = byte == ':'; break;
        default:  // after the seconds
          if (byte == '.') return time_ = TimeStage::kFractionFirst, offset_at_ = 0, true;
          return offset_or_end();
      }
      if (ok) ++at_;
      return ok;
    }
    case TimeStage::kFractionFirst:
    case TimeStage::kFraction:
      if (is_digit(byte) && offset_at_ < kMaxFractionDigits) return time_ = TimeStage::kFraction, ++offset_at_, true;
      return time_ == TimeStage::kFraction && offset_or_end();
    case TimeStage::kOffset: {
      bool ok = false;
      switch (offset_at_) {
        case 0: case 3:
          ok = tens_ok(byte, 0, offset_at_ == 0 ? 23 : 59);
          tens_ = static_cast<uint8_t>(byte - '0');
          break;
        case 1: case 4: ok = units_ok(byte, tens_, 0, offset_at_ == 1 ? 23 : 59); break;
        case 2: ok = byte == ':'; break;
        default: return false;
      }
      if (!ok) return false;
      if (++offset_at_ == 5) time_ = TimeStage::kDone;
      return true;
    }
    case TimeStage::kDone: return false;
  }
  return false;
}

}  // namespace dsv4
