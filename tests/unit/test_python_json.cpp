// python_json_dumps writes what Python's json.dumps(value, ensure_ascii=False) writes; the
// expected strings below were printed by Python 3.11.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "tokenizer/python_json.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

TEST(PythonJson, SeparatorsKeyOrderAndEscapes) {
  const ordered_json value = ordered_json::parse(
      R"({"z": "x/y\"\\\n\t\r\b\f\u0001\u001f\u007f é 中 😀 \u2028", "a": [1, 2.0, null, true, false, {}], "m": {}, "e": []})");
  EXPECT_EQ(python_json_dumps(value),
            "{\"z\": \"x/y\\\"\\\\\\n\\t\\r\\b\\f\\u0001\\u001f\x7f é 中 😀 \u2028\", "
            "\"a\": [1, 2.0, null, true, false, {}], \"m\": {}, \"e\": []}");
}

TEST(PythonJson, FloatsAsPythonRepr) {
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {-0.0, "-0.0"},
      {0.1, "0.1"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {1.5e16, "1.5e+16"},
      {123456789012345680.0, "1.2345678901234568e+17"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {1.5e-7, "1.5e-07"},
      {2.5, "2.5"},
      {1e22, "1e+22"},
      {3.14159, "3.14159"},
      {-1e-10, "-1e-10"},
      {1e300, "1e+300"},
      {5e-324, "5e-324"},
      {100.0, "100.0"},
      {12345.678, "12345.678"},
      {std::numeric_limits<double>::infinity(), "Infinity"},
      {-std::numeric_limits<double>::infinity(), "-Infinity"},
      {std::nan(""), "NaN"},
  };
  for (const auto& [value, expected] : cases) {
    EXPECT_EQ(python_json_dumps(ordered_json(value)), expected) << expected;
  }
}

TEST(PythonJson, Integers) {
  EXPECT_EQ(
      python_json_dumps(ordered_json::parse("[-1, 0, 9223372036854775807, 18446744073709551615]")),
      "[-1, 0, 9223372036854775807, 18446744073709551615]");
}

}  // namespace
}  // namespace dsv4
