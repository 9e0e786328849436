// One thread per data-parallel rank of an engine, for work whose ranks wait on each other (their
// forwards exchange rows at every MoE layer): each rank must run on a thread of its own, which a
// pool that hands indices to whichever thread is free does not promise (two ranks on one thread
// would wait for each other forever). A rank keeps its thread for the engine's life, so a backend
// that binds a device to a thread sees the same one at every step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

class RankThreads {
 public:
  explicit RankThreads(int ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }

  // fn(r) on rank r's thread for every rank at once; returns when all have returned and rethrows
  // the exception of the lowest rank that threw. One call at a time.
  void run(const std::function<void(int)>& fn);

 private:
  void thread_loop(int rank);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace dsv4
