// JSON text written exactly as Python's json.dumps(value, ensure_ascii=False) writes it, which
// is how DeepSeek's prompt encoder serialises tool schemas and tool-call arguments.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dsv4 {

// Separators ", " and ": ", keys in the object's own order, non-ASCII and "/" written as is,
// control characters escaped (\n, \t, ... or \u00XX), floats as Python's repr (shortest
// round-trip digits; exponent form below 1e-4 and from 1e16 up; NaN and Infinity spelled as
// Python does). Integers beyond 64 bits are not representable here: nlohmann's parser has
// already turned them into doubles.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace dsv4
