// The commands' numeric option validators (number_checks.h).
#include "tools/number_checks.h"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

namespace dsv4::tools {
namespace {

// A bound as a user writes it: 65535, 0.01, 1e+30.
std::string bound_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// A validator of the numbers `accept` takes, refusing the others with "must be " + `wanted`;
// `description` is what --help shows beside the option's type.
template <class Accept>
CLI::Validator number_validator(Accept accept, const std::string& wanted, const std::string& description) {
  return CLI::Validator(
      [accept, wanted](std::string& input) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(input.c_str(), &end);
        if (input.empty() || end != input.c_str() + input.size() || std::isnan(v))
          return "'" + input + "' is not a number";
        return accept(v) ? std::string{} : "must be " + wanted + ", got " + input;
      },
      description);
}

}  // namespace

CLI::Validator positive_number() {
  return number_validator([](double v) { return v > 0; }, "above 0", "POSITIVE");
}

CLI::Validator non_negative_number() {
  return number_validator([](double v) { return v >= 0; }, "0 or more", "NONNEGATIVE");
}

CLI::Validator number_from_to(double min, double max) {
  const std::string range = bound_text(min) + " to " + bound_text(max);
  return number_validator([min, max](double v) { return v >= min && v <= max; }, "from " + range, "[" + range + "]");
}

}  // namespace dsv4::tools
