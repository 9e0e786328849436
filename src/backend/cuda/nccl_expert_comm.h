// NCCL's expert group across the GPUs of one process (docs/ARCHITECTURE.md "Several devices"):
// rank r is a CudaOps on its own GPU, used from its own thread (Ops::bind_thread), and every
// all-to-all is two rounds of NCCL sends and receives on the rank's stream, the row counts first,
// then the rows. NCCL is loaded when a group is first made (libnccl.so.2 of the CUDA toolkit), so
// the binaries that never make one do not need the library.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "ops/expert_comm.h"

namespace dsv4::cuda {

// One communicator per rank (ncclCommInitAll over the ranks' devices), rank r's for `ranks[r]`,
// which must outlive it. UsageError when NCCL cannot be loaded (naming the library) or two ranks
// share a GPU (NCCL allows one rank per device: ranks on one GPU take in_process_expert_group);
// CommError when NCCL fails. abort() aborts every communicator of the group.
std::vector<std::unique_ptr<ExpertComm>> nccl_expert_group(std::span<CudaOps* const> ranks);

}  // namespace dsv4::cuda
