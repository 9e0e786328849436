// The in-process expert group: ranks post their send views once their backend has written them,
// meet at a barrier, copy what is addressed to them with their own backend's copy, and meet again
// once the copies are done, before the views may go.
#include "ops/expert_comm.h"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/error.h"

namespace dsv4 {

namespace {

// A barrier that can be broken: arrive_and_wait() returns once every rank has arrived, or throws
// CommError once abort() was called (std::barrier cannot be woken early).
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int ranks) : ranks_(ranks) {}

  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    throw_if_aborted();
    const uint64_t generation = generation_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return generation_ != generation || !why_.empty(); });
    if (generation_ == generation) throw_if_aborted();
  }

  void abort(const std::string& why) {
    {
      std::lock_guard lock(mutex_);
      if (why_.empty()) why_ = why.empty() ? std::string("a rank gave the group up") : why;
    }
    all_arrived_.notify_all();
  }

  void throw_if_aborted() const {
    if (!why_.empty()) throw CommError("expert group: aborted (" + why_ + ")");
  }

 private:
  const int ranks_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string why_;
};

struct SharedExchange {
  explicit SharedExchange(int ranks) : posted(static_cast<size_t>(ranks)), arrive(ranks) {}
  std::vector<std::vector<ConstTensorView>> posted;  // [source][destination]
  AbortableBarrier arrive;
};

class InProcessExpertComm final : public ExpertComm {
 public:
  InProcessExpertComm(std::shared_ptr<SharedExchange> shared, int rank, int size)
      : shared_(std::move(shared)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void abort(const std::string& why) override { shared_->arrive.abort(why); }

  std::vector<DeviceTensor> all_to_all(Ops& ops, std::span<const ConstTensorView> send) override {
    if (static_cast<int>(send.size()) != size_)
      throw UsageError("expert all_to_all: rank " + std::to_string(rank_) + " sends " + std::to_string(send.size()) +
                       " messages to a group of " + std::to_string(size_));
    ops.synchronize();  // the rows are written (an asynchronous backend may still be writing them)
    shared_->posted[static_cast<size_t>(rank_)].assign(send.begin(), send.end());
    shared_->arrive.arrive_and_wait();  // every rank has posted
    std::vector<DeviceTensor> received;
    for (int source = 0; source < size_; ++source) {
      const ConstTensorView rows = shared_->posted[static_cast<size_t>(source)][static_cast<size_t>(rank_)];
      DeviceTensor copy = ops.alloc(rows.dtype(), rows.shape());
      if (rows.numel() > 0) ops.copy({rows, copy.view()});
      received.push_back(std::move(copy));
    }
    ops.synchronize();
    shared_->arrive.arrive_and_wait();  // every rank has copied: the senders' views may go
    return received;
  }

 private:
  std::shared_ptr<SharedExchange> shared_;
  int rank_;
  int size_;
};

}  // namespace

std::vector<std::unique_ptr<ExpertComm>> in_process_expert_group(int ranks) {
  if (ranks < 1) throw UsageError("an expert group needs at least one rank, not " + std::to_string(ranks));
  const auto shared = std::make_shared<SharedExchange>(ranks);
  std::vector<std::unique_ptr<ExpertComm>> group;
  for (int r = 0; r < ranks; ++r) group.push_back(std::make_unique<InProcessExpertComm>(shared, r, ranks));
  return group;
}

}  // namespace dsv4
