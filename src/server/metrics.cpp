// Prometheus text for GET /metrics; see metrics.h. Bucket bounds are vLLM's.
#include "server/metrics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace dsv4::server {
namespace {

constexpr std::array<std::string_view, 4> kFinishReasons = {"stop", "length", "abort", "error"};

std::string format_value(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

double seconds_between(EngineClock::time_point from, EngineClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  out += name;
  out += '{';
  out += labels;
  out += "} ";
  out += format_value(value);
  out += '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, std::string_view name, std::string_view labels) const {
  uint64_t cumulative = 0;
  const std::string bucket_name = std::string(name) + "_bucket";
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? format_value(bounds_[i]) : "+Inf";
    sample(out, bucket_name, std::string(labels) + ",le=\"" + le + "\"",
           static_cast<double>(cumulative));
  }
  sample(out, std::string(name) + "_sum", labels, sum_);
  sample(out, std::string(name) + "_count", labels, static_cast<double>(count_));
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + model_name + "\""),
      time_to_first_token_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                            1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      time_per_output_token_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                              1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_request_latency_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                            40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

void ServerMetrics::record_finished(const RequestMetrics& metrics, std::string_view finish_reason) {
  const std::lock_guard lock(mutex_);
  if (metrics.completion_tokens > 0) {
    time_to_first_token_.observe(seconds_between(metrics.arrival, metrics.first_token));
  }
  if (metrics.completion_tokens > 1) {
    time_per_output_token_.observe(seconds_between(metrics.first_token, metrics.finished) /
                                   static_cast<double>(metrics.completion_tokens - 1));
  }
  e2e_request_latency_.observe(seconds_between(metrics.arrival, metrics.finished));
  const auto reason = std::find(kFinishReasons.begin(), kFinishReasons.end(), finish_reason);
  if (reason != kFinishReasons.end()) ++finished_[static_cast<size_t>(reason - kFinishReasons.begin())];
}

std::string ServerMetrics::render(const EngineStats& stats) const {
  std::string out;
  header(out, "dsv4:num_requests_running", "gauge", "Requests in the running batch.");
  sample(out, "dsv4:num_requests_running", labels_, static_cast<double>(stats.running));
  header(out, "dsv4:num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
  sample(out, "dsv4:num_requests_waiting", labels_, static_cast<double>(stats.waiting));
  header(out, "dsv4:kv_cache_usage_perc", "gauge", "KV-cache usage; 1 means 100 percent.");
  sample(out, "dsv4:kv_cache_usage_perc", labels_, stats.cache_usage());
  header(out, "dsv4:num_preemptions_total", "counter", "Preemptions of running requests.");
  sample(out, "dsv4:num_preemptions_total", labels_, static_cast<double>(stats.preemptions));
  header(out, "dsv4:prefix_cache_queries_total", "counter",
         "Tokens of admitted requests looked up in the prefix cache.");
  sample(out, "dsv4:prefix_cache_queries_total", labels_, static_cast<double>(stats.prefix_cache_queries));
  header(out, "dsv4:prefix_cache_hits_total", "counter",
         "Tokens of admitted requests not computed thanks to the prefix cache.");
  sample(out, "dsv4:prefix_cache_hits_total", labels_, static_cast<double>(stats.prefix_cache_hits));
  header(out, "dsv4:prompt_tokens_total", "counter", "Prompt tokens of submitted requests.");
  sample(out, "dsv4:prompt_tokens_total", labels_, static_cast<double>(stats.prompt_tokens));
  header(out, "dsv4:generation_tokens_total", "counter", "Generated tokens.");
  sample(out, "dsv4:generation_tokens_total", labels_,
         static_cast<double>(stats.generation_tokens));
  const std::lock_guard lock(mutex_);
  header(out, "dsv4:request_success_total", "counter", "Finished requests by finish reason.");
  for (size_t i = 0; i < kFinishReasons.size(); ++i) {
    sample(out, "dsv4:request_success_total",
           labels_ + ",finished_reason=\"" + std::string(kFinishReasons[i]) + "\"",
           static_cast<double>(finished_[i]));
  }
  header(out, "dsv4:time_to_first_token_seconds", "histogram", "Time to the first token.");
  time_to_first_token_.render(out, "dsv4:time_to_first_token_seconds", labels_);
  header(out, "dsv4:time_per_output_token_seconds", "histogram",
         "Mean time per output token after the first, per request.");
  time_per_output_token_.render(out, "dsv4:time_per_output_token_seconds", labels_);
  header(out, "dsv4:e2e_request_latency_seconds", "histogram", "Request latency end to end.");
  e2e_request_latency_.render(out, "dsv4:e2e_request_latency_seconds", labels_);
  return out;
}

}  // namespace dsv4::server
