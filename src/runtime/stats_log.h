// The serving engine's periodic stats line on the log, as vLLM prints one every 10 s ("Avg prompt
// throughput: ... tokens/s, Avg generation throughput: ..., Running: N reqs, Waiting: M reqs, KV
// cache usage: x%, Prefix cache hit rate: y%"): the formatter over two EngineStats, and a thread
// that prints it for an engine while the engine has work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/engine.h"

namespace dsv4 {

// The line for the `seconds` from `before` to `now`: prompt tokens computed and tokens emitted per
// second, the requests running and waiting and the cache in use at `now`, and the share of the
// prompt tokens looked up in the prefix cache over the interval that it held ("-" when none was).
std::string stats_log_line(const EngineStats& before, const EngineStats& now, double seconds);

// Every `interval`, hands `write` the stats line of `engine` since the previous one, unless the
// engine was idle all along (no step, no request running or waiting), as vLLM logs only while
// serving. Stops (without a last line) when destroyed.
class StatsLogger {
 public:
  StatsLogger(const Engine& engine, std::chrono::milliseconds interval, std::function<void(const std::string&)> write);
  ~StatsLogger();
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;

 private:
  void loop();

  const Engine& engine_;
  std::chrono::milliseconds interval_;
  std::function<void(const std::string&)> write_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dsv4
