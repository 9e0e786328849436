// A fixed set of worker threads running parallel-for loops (the CPU backend's ops, the engine's
// sampling). Every loop body handles independent indices, so results never depend on the thread
// count or the schedule.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

class ThreadPool {
 public:
  // `threads` counts the calling thread too; 1 runs everything inline.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for every i in [0, count) and returns when all are done; rethrows the first
  // exception a body threw. A call from inside a body runs inline (no nesting).
  void parallel_for(int64_t count, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunk();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t count_ = 0;
  int64_t next_ = 0;
  int64_t finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace dsv4
