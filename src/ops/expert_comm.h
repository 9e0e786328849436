// The communication of expert parallelism (docs/ARCHITECTURE.md "Several devices"): the ranks of
// a group exchange rows of work with an all-to-all at every MoE layer. One interface, two kinds of
// group: in-process (ranks as threads of one process whose backends can read each other's memory:
// the CPU backend, or two ranks on one GPU), which CI tests, and NCCL's across GPUs (to come).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace dsv4 {

class ExpertComm {
 public:
  virtual ~ExpertComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sends send[r] ([rows_r, width] rows, one dtype and width for every rank and call of a layer's
  // exchange; rows_r may be 0) to rank r and returns, by source rank, the rows each rank sent this
  // one, in backend memory of `ops`. Every rank of the group makes the call, in the same order.
  // Throws CommError once the group is aborted.
  virtual std::vector<DeviceTensor> all_to_all(Ops& ops, std::span<const ConstTensorView> send) = 0;
  // Gives the group up: ranks waiting in an exchange, and every exchange after, throw CommError
  // (`why` in its message). A rank whose forward fails between exchanges calls it, so that the
  // others fail too rather than wait for it. Any thread; idempotent.
  virtual void abort(const std::string& why) = 0;
};

// `ranks` communicators of one in-process group: rank i is element i, each to be used from its
// own thread.
std::vector<std::unique_ptr<ExpertComm>> in_process_expert_group(int ranks);

}  // namespace dsv4
