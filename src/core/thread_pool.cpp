// ThreadPool's parallel-for: workers take indices one at a time from a shared counter.
#include "core/thread_pool.h"

namespace dsv4 {

namespace {
thread_local bool t_inside_pool = false;
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunk() {
  for (;;) {
    int64_t i;
    {
      std::lock_guard lock(mutex_);
      if (next_ >= count_) return;
      i = next_++;
    }
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    if (++finished_ == count_) work_done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunk();
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t)>& fn) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1 || t_inside_pool) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    count_ = count;
    next_ = 0;
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();
  t_inside_pool = true;
  run_chunk();
  t_inside_pool = false;
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    work_done_.wait(lock, [&] { return finished_ == count_; });
    fn_ = nullptr;
    count_ = 0;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dsv4
