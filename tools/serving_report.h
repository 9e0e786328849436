// The report of vLLM's serving benchmark, shared by `bench throughput` (through the engine) and
// `bench serve` (over HTTP): latency summaries as numpy computes them, and the rows of the
// "Serving Benchmark Result" block in vLLM's layout.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dsv4::tools {

// Mean, median, population standard deviation and the asked percentiles (linear interpolation,
// as numpy's percentile) in milliseconds; all zero for no values.
struct LatencySummary {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (percentile in [0, 100], value)
  double percentile_ms(double p) const;  // one of those asked for
};

LatencySummary summarise_ms(std::vector<double> seconds, const std::vector<double>& percentiles = {99});

// A percentile as vLLM names it in its rows and keys: "99", "99.9".
std::string percentile_word(double p);

// `title` centred in a 50-column line of `fill` (Python's "{:fill^50}").
std::string centred_title(const std::string& title, char fill);

// One row of the block: the name left in 40 columns, then the value ("{:<40} {:<10.2f}", and
// "{:<40} {:<10}" for counts).
void print_result_row(const std::string& name, double value);
void print_result_count(const std::string& name, long long value);

// A metric's section: its header centred in dashes, then Mean, Median and a P<p> NAME (ms) row per
// asked percentile.
void print_latency_section(const std::string& header, const std::string& name, const LatencySummary& s);

}  // namespace dsv4::tools
