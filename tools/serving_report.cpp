// The serving benchmark report's summaries and rows (serving_report.h).
#include "tools/serving_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dsv4::tools {

LatencySummary summarise_ms(std::vector<double> seconds, const std::vector<double>& percentiles) {
  LatencySummary s;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, 0.0);
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  const auto percentile = [&seconds](double q) {
    const double at = q * static_cast<double>(seconds.size() - 1);
    const size_t lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, seconds.size() - 1);
    return seconds[lo] + (seconds[hi] - seconds[lo]) * (at - static_cast<double>(lo));
  };
  const double n = static_cast<double>(seconds.size());
  double sum = 0;
  for (double v : seconds) sum += v;
  const double mean = sum / n;
  double squares = 0;
  for (double v : seconds) squares += (v - mean) * (v - mean);
  s.mean_ms = 1e3 * mean;
  s.median_ms = 1e3 * percentile(0.5);
  s.std_ms = 1e3 * std::sqrt(squares / n);
  for (auto& [p, value] : s.percentiles_ms) value = 1e3 * percentile(p / 100.0);
  return s;
}

double LatencySummary::percentile_ms(double p) const {
  for (const auto& [q, value] : percentiles_ms)
    if (q == p) return value;
  return 0.0;
}

std::string percentile_word(double p) {
  if (p == std::floor(p)) return std::to_string(static_cast<long long>(p));
  char text[32];
  std::snprintf(text, sizeof text, "%g", p);
  return text;
}

std::string centred_title(const std::string& title, char fill) {
  constexpr size_t kWidth = 50;
  if (title.size() >= kWidth) return title;
  const size_t left = (kWidth - title.size()) / 2;
  return std::string(left, fill) + title + std::string(kWidth - title.size() - left, fill);
}

void print_result_row(const std::string& name, double value) { std::printf("%-40s %-10.2f\n", name.c_str(), value); }

void print_result_count(const std::string& name, long long value) { std::printf("%-40s %-10lld\n", name.c_str(), value); }

void print_latency_section(const std::string& header, const std::string& name, const LatencySummary& s) {
  std::printf("%s\n", centred_title(header, '-').c_str());
  print_result_row("Mean " + name + " (ms):", s.mean_ms);
  print_result_row("Median " + name + " (ms):", s.median_ms);
  for (const auto& [p, value] : s.percentiles_ms) print_result_row("P" + percentile_word(p) + " " + name + " (ms):", value);
}

}  // namespace dsv4::tools
