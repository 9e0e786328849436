// The periodic stats line (runtime/stats_log.h): its arithmetic over two EngineStats.
#include <gtest/gtest.h>

#include "runtime/stats_log.h"

namespace dsv4 {
namespace {

TEST(StatsLogLine, IsTheIntervalsRatesAndTheCurrentCounts) {
  EngineStats before, now;
  before.prompt_tokens_computed = 1000;
  before.generation_tokens = 50;
  before.prefix_cache_queries = 400;
  before.prefix_cache_hits = 100;
  now.prompt_tokens_computed = 1000 + 8192 * 5;
  now.generation_tokens = 50 + 1234;
  now.prefix_cache_queries = 400 + 2048;
  now.prefix_cache_hits = 100 + 512;
  now.running = 64;
  now.waiting = 3;
  now.cache_blocks_total = 1000;
  now.cache_blocks_used = 173;
  EXPECT_EQ(stats_log_line(before, now, 10.0),
            "Avg prompt throughput: 4096.0 tokens/s, Avg generation throughput: 123.4 tokens/s, Running: 64 reqs, "
            "Waiting: 3 reqs, KV cache usage: 17.3%, Prefix cache hit rate: 25.0%");
}

TEST(StatsLogLine, SaysNoHitRateWithoutLookupsAndNoRateWithoutTime) {
  EngineStats s;
  s.generation_tokens = 10;
  EXPECT_EQ(stats_log_line(s, s, 10.0),
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 "
            "reqs, KV cache usage: 0.0%, Prefix cache hit rate: -");
  EngineStats later = s;
  later.generation_tokens = 20;
  EXPECT_NE(stats_log_line(s, later, 0.0).find("Avg generation throughput: 0.0 tokens/s"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
