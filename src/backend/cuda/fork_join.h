// ForkJoin: the CUDA side of Ops::fork_join (ARCHITECTURE.md §3, vLLM's execute_in_parallel). Side
// tasks run on side streams that fork from the current stream through a start event and join it
// back through their done events, so the same calls work eagerly and under stream capture (where
// the events become graph edges). No host synchronisation happens here.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <functional>

#include "ops/fork_join.h"

namespace dsv4::cuda {

class ForkJoin {
 public:
  // Creates the side streams (non-blocking) and the events (no timing) on the current device.
  ForkJoin();
  ~ForkJoin();
  ForkJoin(const ForkJoin&) = delete;
  ForkJoin& operator=(const ForkJoin&) = delete;

  // Runs `tasks` forked from `current`: records the start event on `current`; each non-empty side
  // task i makes side stream i wait on it, runs with the current stream switched to side stream i
  // (through `switch_to`), and records done event i there; then the main task runs on `current`,
  // and `current` waits on the done event of every side task that ran. Empty slots are skipped
  // (no stream switch, no event). If a task throws, the side tasks that ran are still joined and
  // the current stream is switched back to `current` before the exception leaves. A fork/join
  // inside a task (the side streams are in use) runs in order on that task's stream.
  void run(const ForkJoinTasks& tasks, cudaStream_t current, const std::function<void(cudaStream_t)>& switch_to);

  cudaStream_t side_stream(size_t slot) const { return side_streams_.at(slot); }

 private:
  void destroy() noexcept;

  std::array<cudaStream_t, kMaxSideTasks> side_streams_{};
  std::array<cudaEvent_t, kMaxSideTasks> done_{};
  cudaEvent_t start_ = nullptr;
  bool running_ = false;
};

}  // namespace dsv4::cuda
