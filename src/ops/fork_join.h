// Fork/join of independent chains of work (ARCHITECTURE.md §3, vLLM's execute_in_parallel): the
// model hands a backend one main task and up to three side tasks; a backend with several streams
// may overlap them, every other backend runs them in order. Platform-free: no stream appears here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace dsv4 {

inline constexpr size_t kMaxSideTasks = 3;

// The tasks of one fork/join. Each task enqueues ops on the backend's current stream; the side
// tasks may depend on everything enqueued before the fork/join, never on the main task or on each
// other, and they must not write what another task reads or writes. After the call, everything
// every task enqueued is ordered before what comes next.
struct ForkJoinTasks {
  std::string_view chain;  // what the tasks are (e.g. the layer kind "csa"), for plans and traces
  int64_t tokens = 0;      // tokens of the batch: overlap pays off on small batches, not large ones
  std::function<void()> main;
  std::array<std::function<void()>, kMaxSideTasks> side;  // an empty slot is skipped
};

// The sequential contract every backend can fall back to: main first, then each non-empty side
// task in slot order, all on the current stream. An empty main task is skipped too.
inline void run_in_order(const ForkJoinTasks& tasks) {
  if (tasks.main) tasks.main();
  for (const std::function<void()>& side : tasks.side)
    if (side) side();
}

// Whether a backend with side streams uses them (the --multi-stream flag of the tools).
enum class MultiStreamMode {
  kOff,   // every fork/join runs in order on one stream
  kOn,    // side tasks always run on their own streams
  kAuto,  // side streams for batches of at most auto_max_tokens tokens, in order above
};

// "off", "on", "auto": the mode's name on the command line and in reports.
inline std::string_view multi_stream_mode_name(MultiStreamMode mode) {
  switch (mode) {
    case MultiStreamMode::kOff: return "off";
    case MultiStreamMode::kOn: return "on";
    case MultiStreamMode::kAuto: return "auto";
  }
  return "off";
}

struct MultiStreamPolicy {
  // Measured on the H200 (docs/PERF.md, bench layers at V4-Flash geometry): side streams cut a
  // decode step's CSA layer by 14-20% at batch 1-16, break even at batch 64 and leave an 8k prefill
  // unchanged; forking bf16 GEMMs cost up to 6% at M = 4096 (ENV.md). Hence auto, with side
  // streams up to 2048 tokens.
  MultiStreamMode mode = MultiStreamMode::kAuto;
  int64_t auto_max_tokens = 2048;

  bool side_streams_for(int64_t tokens) const {
    return mode == MultiStreamMode::kOn || (mode == MultiStreamMode::kAuto && tokens <= auto_max_tokens);
  }
};

}  // namespace dsv4
