// The server's Prometheus metrics (GET /metrics), named as vLLM names them under a "dsv4:"
// prefix (vllm:num_requests_running -> dsv4:num_requests_running, ...), so dashboards written
// for vLLM need only the prefix changed. Gauges and token counters come from the engine's stats
// when scraped; latency histograms and finished-request counts are recorded per request.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/engine.h"

namespace dsv4::server {

// A Prometheus histogram with fixed upper bounds (cumulative buckets, +Inf, _sum, _count).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The _bucket, _sum and _count lines of `name` with `labels` ("model_name=\"x\"").
  void render(std::string& out, std::string_view name, std::string_view labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // A finished request: its latencies (from the last chunk's metrics) and its finish reason
  // ("stop", "length", "abort", "error").
  void record_finished(const RequestMetrics& metrics, std::string_view finish_reason);

  // The exposition text, with the engine's gauges and counters as of `stats`.
  std::string render(const EngineStats& stats) const;

 private:
  std::string labels_;
  mutable std::mutex mutex_;
  Histogram time_to_first_token_;
  Histogram time_per_output_token_;
  Histogram e2e_request_latency_;
  std::array<uint64_t, 4> finished_{};  // by finish reason, in kFinishReasons order
};

}  // namespace dsv4::server
