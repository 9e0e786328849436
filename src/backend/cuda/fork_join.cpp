// ForkJoin: side streams and events, and the fork/join order of execute_in_parallel.
#include "backend/cuda/fork_join.h"

#include "kernels/cuda_check.h"

namespace dsv4::cuda {

ForkJoin::ForkJoin() {
  try {
    DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming));
    for (size_t i = 0; i < kMaxSideTasks; ++i) {
      DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&side_streams_[i], cudaStreamNonBlocking));
      DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
    }
  } catch (...) {
    destroy();
    throw;
  }
}

ForkJoin::~ForkJoin() { destroy(); }

// Errors cannot be reported from a destructor. Destroying a stream with work pending is legal:
// the work completes first.
void ForkJoin::destroy() noexcept {
  for (size_t i = 0; i < kMaxSideTasks; ++i) {
    if (done_[i] != nullptr) cudaEventDestroy(done_[i]);
    if (side_streams_[i] != nullptr) cudaStreamDestroy(side_streams_[i]);
    done_[i] = nullptr;
    side_streams_[i] = nullptr;
  }
  if (start_ != nullptr) cudaEventDestroy(start_);
  start_ = nullptr;
}

void ForkJoin::run(const ForkJoinTasks& tasks, cudaStream_t current,
                   const std::function<void(cudaStream_t)>& switch_to) {
  if (running_) {
    run_in_order(tasks);
    return;
  }
  running_ = true;
  std::array<bool, kMaxSideTasks> forked{};
  try {
    bool any_side = false;
    for (const auto& side : tasks.side) any_side = any_side || static_cast<bool>(side);
    if (any_side) DSV4_CUDA_CHECK(cudaEventRecord(start_, current));
    for (size_t i = 0; i < kMaxSideTasks; ++i) {
      if (!tasks.side[i]) continue;
      DSV4_CUDA_CHECK(cudaStreamWaitEvent(side_streams_[i], start_, 0));
      forked[i] = true;
      switch_to(side_streams_[i]);
      tasks.side[i]();
      switch_to(current);
      DSV4_CUDA_CHECK(cudaEventRecord(done_[i], side_streams_[i]));
    }
    if (tasks.main) tasks.main();
    for (size_t i = 0; i < kMaxSideTasks; ++i)
      if (forked[i]) DSV4_CUDA_CHECK(cudaStreamWaitEvent(current, done_[i], 0));
  } catch (...) {
    // Join what was forked, so work enqueued on `current` afterwards (frees of the tasks'
    // tensors included) stays ordered after the side work, and a capture can still end. A done
    // event already recorded is recorded again at the same point: nothing was enqueued since.
    switch_to(current);
    for (size_t i = 0; i < kMaxSideTasks; ++i) {
      if (!forked[i]) continue;
      cudaEventRecord(done_[i], side_streams_[i]);
      cudaStreamWaitEvent(current, done_[i], 0);
    }
    running_ = false;
    throw;
  }
  running_ = false;
}

}  // namespace dsv4::cuda
