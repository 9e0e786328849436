// RankThreads: a generation counter wakes every rank's thread for a call; the last to finish
// wakes the caller.
#include "runtime/rank_threads.h"

#include <string>

#include "core/error.h"

namespace dsv4 {

RankThreads::RankThreads(int ranks) : errors_(static_cast<size_t>(ranks)) {
  if (ranks < 1) throw UsageError("rank threads: at least one rank, not " + std::to_string(ranks));
  for (int r = 0; r < ranks; ++r) threads_.emplace_back([this, r] { thread_loop(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int)>& fn) {
  std::unique_lock lock(mutex_);
  fn_ = &fn;
  running_ = size();
  for (std::exception_ptr& e : errors_) e = nullptr;
  ++generation_;
  work_ready_.notify_all();
  work_done_.wait(lock, [this] { return running_ == 0; });
  fn_ = nullptr;
  for (const std::exception_ptr& e : errors_)
    if (e) std::rethrow_exception(e);
}

void RankThreads::thread_loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn = nullptr;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    std::exception_ptr error;
    try {
      (*fn)(rank);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    errors_[static_cast<size_t>(rank)] = error;
    if (--running_ == 0) work_done_.notify_all();
  }
}

}  // namespace dsv4
