// The stats line's arithmetic and the thread that prints it (stats_log.h).
#include "runtime/stats_log.h"

#include <cstdio>
#include <utility>

#include "core/error.h"

namespace dsv4 {

std::string stats_log_line(const EngineStats& before, const EngineStats& now, double seconds) {
  const auto per_second = [seconds](uint64_t later, uint64_t earlier) {
    return seconds > 0 && later >= earlier ? static_cast<double>(later - earlier) / seconds : 0.0;
  };
  const uint64_t queries = now.prefix_cache_queries - before.prefix_cache_queries;
  const uint64_t hits = now.prefix_cache_hits - before.prefix_cache_hits;
  char hit_rate[32] = "-";
  if (queries > 0)
    std::snprintf(hit_rate, sizeof hit_rate, "%.1f%%", 100.0 * static_cast<double>(hits) / static_cast<double>(queries));
  char line[320];
  std::snprintf(line, sizeof line,
                "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %lld reqs, "
                "Waiting: %lld reqs, KV cache usage: %.1f%%, Prefix cache hit rate: %s",
                per_second(now.prompt_tokens_computed, before.prompt_tokens_computed),
                per_second(now.generation_tokens, before.generation_tokens), static_cast<long long>(now.running),
                static_cast<long long>(now.waiting), 100.0 * now.cache_usage(), hit_rate);
  return line;
}

StatsLogger::StatsLogger(const Engine& engine, std::chrono::milliseconds interval,
                         std::function<void(const std::string&)> write)
    : engine_(engine), interval_(interval), write_(std::move(write)) {
  if (interval_.count() <= 0) throw UsageError("stats logger: the interval must be positive");
  thread_ = std::thread([this] { loop(); });
}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StatsLogger::loop() {
  EngineStats before = engine_.stats();
  auto since = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    const EngineStats now = engine_.stats();
    const auto at = std::chrono::steady_clock::now();
    const bool busy = now.steps != before.steps || now.running > 0 || now.waiting > 0;
    if (busy) write_(stats_log_line(before, now, std::chrono::duration<double>(at - since).count()));
    before = now;
    since = at;
  }
}

}  // namespace dsv4
