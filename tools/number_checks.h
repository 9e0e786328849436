// Validators of the commands' numeric options whose refusals say what is wrong in words: CLI11's
// own (PositiveNumber, NonNegativeNumber, Range) report "Value 0 not in range 0.000000 to " and
// the largest double written out in full, and the same "not in range" for a value that is not a
// number at all.
#pragma once

#include <CLI/CLI.hpp>

namespace dsv4::tools {

// A number above 0: "--batch: must be above 0, got 0"; "--batch: 'abc' is not a number".
CLI::Validator positive_number();
// A number of 0 or more: "--threads: must be 0 or more, got -1".
CLI::Validator non_negative_number();
// A number from min to max: "--port: must be from 0 to 65535, got 70000".
CLI::Validator number_from_to(double min, double max);

}  // namespace dsv4::tools
