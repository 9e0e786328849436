// Python-compatible JSON writer (json.dumps with ensure_ascii=False and default separators).
#include "tokenizer/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "core/error.h"

namespace dsv4 {
namespace {

void append_string(std::string& out, const std::string& text) {
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Python's float repr: the shortest digits that round-trip, laid out in positional notation
// when the decimal point falls within [-4, 16) places of the first digit, else as d.ddde+XX.
void append_float(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
    return;
  }
  if (std::isinf(value)) {
    out += value < 0 ? "-Infinity" : "Infinity";
    return;
  }
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  if (result.ec != std::errc()) throw UsageError("python_json_dumps: cannot format a double");
  const std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));
  const size_t e_pos = sci.find('e');
  std::string_view mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  if (!mantissa.empty() && mantissa.front() == '-') {
    out += '-';
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  const int n_digits = static_cast<int>(digits.size());
  const int point = exponent + 1;  // position of the decimal point relative to the first digit
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out += digits;
    } else if (point >= n_digits) {
      out += digits;
      out.append(static_cast<size_t>(point - n_digits), '0');
      out += ".0";
    } else {
      out.append(digits, 0, static_cast<size_t>(point));
      out += '.';
      out.append(digits, static_cast<size_t>(point));
    }
    return;
  }
  out += digits[0];
  if (n_digits > 1) {
    out += '.';
    out.append(digits, 1);
  }
  char exp_text[16];
  std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp_text;
}

void append_value(std::string& out, const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null: out += "null"; break;
    case Type::boolean: out += value.get<bool>() ? "true" : "false"; break;
    case Type::number_integer: out += std::to_string(value.get<int64_t>()); break;
    case Type::number_unsigned: out += std::to_string(value.get<uint64_t>()); break;
    case Type::number_float: append_float(out, value.get<double>()); break;
    case Type::string: append_string(out, value.get_ref<const std::string&>()); break;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        append_value(out, item);
      }
      out += ']';
      break;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_string(out, key);
        out += ": ";
        append_value(out, item);
      }
      out += '}';
      break;
    }
    case Type::binary:
    case Type::discarded:
      throw UsageError("python_json_dumps: binary and discarded values have no JSON text");
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_value(out, value);
  return out;
}

}  // namespace dsv4
