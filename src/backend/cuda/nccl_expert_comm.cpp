// The NCCL expert group: NCCL's functions looked up with dlopen (written by hand: NCCL has no
// loader of its own, and linking it would make every CUDA binary need its 200 MB library), the
// group's communicators, and the all-to-all as grouped sends and receives.
#include "backend/cuda/nccl_expert_comm.h"

#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace dsv4::cuda {

namespace {

// The NCCL functions the group calls, from the library found at first use.
struct NcclApi {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    const char* const names[] = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
    void* library = nullptr;
    for (const char* name : names)
      if ((library = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (library == nullptr)
      throw UsageError(std::string("expert parallelism across GPUs needs NCCL: libnccl.so.2 (the CUDA toolkit's) "
                                   "could not be loaded: ") +
                       dlerror());
    const auto symbol = [&](const char* name) {
      void* f = dlsym(library, name);
      if (f == nullptr) throw UsageError(std::string("libnccl.so.2 has no ") + name);
      return f;
    };
    NcclApi a;
    a.comm_init_all = reinterpret_cast<decltype(a.comm_init_all)>(symbol("ncclCommInitAll"));
    a.comm_destroy = reinterpret_cast<decltype(a.comm_destroy)>(symbol("ncclCommDestroy"));
    a.comm_abort = reinterpret_cast<decltype(a.comm_abort)>(symbol("ncclCommAbort"));
    a.group_start = reinterpret_cast<decltype(a.group_start)>(symbol("ncclGroupStart"));
    a.group_end = reinterpret_cast<decltype(a.group_end)>(symbol("ncclGroupEnd"));
    a.send = reinterpret_cast<decltype(a.send)>(symbol("ncclSend"));
    a.recv = reinterpret_cast<decltype(a.recv)>(symbol("ncclRecv"));
    a.error_string = reinterpret_cast<decltype(a.error_string)>(symbol("ncclGetErrorString"));
    return a;
  }();
  return api;
}

void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess)
    throw CommError(std::string("expert group: ") + what + " failed: " + nccl().error_string(result));
}

// The group's communicators, shared by its ranks: abort() ends them all, once.
struct NcclGroup {
  std::vector<ncclComm_t> comms;
  std::mutex mutex;
  std::string aborted;  // why, once aborted

  ~NcclGroup() {
    for (ncclComm_t c : comms) (aborted.empty() ? nccl().comm_destroy : nccl().comm_abort)(c);
  }
  void abort(const std::string& why) {
    std::lock_guard lock(mutex);
    if (!aborted.empty()) return;
    aborted = why.empty() ? std::string("a rank gave the group up") : why;
    for (ncclComm_t c : comms) nccl().comm_abort(c);
  }
  void throw_if_aborted() {
    std::lock_guard lock(mutex);
    if (!aborted.empty()) throw CommError("expert group: aborted (" + aborted + ")");
  }
};

class NcclExpertComm final : public ExpertComm {
 public:
  NcclExpertComm(std::shared_ptr<NcclGroup> group, CudaOps& ops, int rank)
      : group_(std::move(group)), ops_(ops), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->comms.size()); }
  void abort(const std::string& why) override { group_->abort(why); }

  std::vector<DeviceTensor> all_to_all(Ops& ops, std::span<const ConstTensorView> send) override {
    group_->throw_if_aborted();
    const int n = size();
    if (&ops != &ops_)
      throw UsageError("expert all_to_all: rank " + std::to_string(rank_) + " called with another backend than its own");
    if (static_cast<int>(send.size()) != n)
      throw UsageError("expert all_to_all: rank " + std::to_string(rank_) + " sends " + std::to_string(send.size()) +
                       " messages to a group of " + std::to_string(n));
    const DType dtype = send[0].dtype();
    const int64_t width = send[0].rank() == 2 ? send[0].dim(1) : 0;
    for (const ConstTensorView& v : send)
      if (v.dtype() != dtype || v.rank() != 2 || v.dim(1) != width)
        throw UsageError("expert all_to_all: rank " + std::to_string(rank_) +
                         "'s messages are not rows of one dtype and width");
    const ncclComm_t comm = group_->comms[static_cast<size_t>(rank_)];
    const cudaStream_t stream = ops_.stream();

    // Round 1: every rank's row counts for every other.
    std::vector<int64_t> counts(static_cast<size_t>(2 * n));
    for (int r = 0; r < n; ++r) counts[static_cast<size_t>(r)] = send[static_cast<size_t>(r)].dim(0);
    DeviceTensor device_counts = ops_.alloc(DType::kI64, {2 * n});
    auto* sent = reinterpret_cast<int64_t*>(device_counts.view().bytes());
    int64_t* received = sent + n;
    DSV4_CUDA_CHECK(cudaMemcpyAsync(sent, counts.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
    check(nccl().group_start(), "ncclGroupStart");
    for (int r = 0; r < n; ++r) {
      check(nccl().send(sent + r, 1, ncclInt64, r, comm, stream), "ncclSend (row counts)");
      check(nccl().recv(received + r, 1, ncclInt64, r, comm, stream), "ncclRecv (row counts)");
    }
    check(nccl().group_end(), "ncclGroupEnd");
    DSV4_CUDA_CHECK(cudaMemcpyAsync(counts.data() + n, received, n * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
    const cudaError_t synced = cudaStreamSynchronize(stream);
    group_->throw_if_aborted();  // an abort ends the wait with an error of its own
    DSV4_CUDA_CHECK(synced);

    // Round 2: the rows.
    const size_t row_bytes = static_cast<size_t>(width) * dtype_size(dtype);
    std::vector<DeviceTensor> out;
    for (int r = 0; r < n; ++r) out.push_back(ops_.alloc(dtype, {counts[static_cast<size_t>(n + r)], width}));
    check(nccl().group_start(), "ncclGroupStart");
    for (int r = 0; r < n; ++r) {
      const ConstTensorView& rows = send[static_cast<size_t>(r)];
      if (rows.dim(0) > 0)
        check(nccl().send(rows.bytes(), static_cast<size_t>(rows.dim(0)) * row_bytes, ncclUint8, r, comm, stream),
              "ncclSend (rows)");
      const DeviceTensor& into = out[static_cast<size_t>(r)];
      if (into.dim(0) > 0)
        check(nccl().recv(into.view().bytes(), static_cast<size_t>(into.dim(0)) * row_bytes, ncclUint8, r, comm, stream),
              "ncclRecv (rows)");
    }
    check(nccl().group_end(), "ncclGroupEnd");
    return out;
  }

 private:
  std::shared_ptr<NcclGroup> group_;
  CudaOps& ops_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<ExpertComm>> nccl_expert_group(std::span<CudaOps* const> ranks) {
  if (ranks.empty()) throw UsageError("an expert group needs at least one rank, not 0");
  std::vector<int> devices;
  for (CudaOps* ops : ranks) {
    if (std::find(devices.begin(), devices.end(), ops->device()) != devices.end())
      throw UsageError("expert group: two ranks on GPU " + std::to_string(ops->device()) +
                       "; NCCL takes one rank per GPU (ranks on one GPU exchange in process)");
    devices.push_back(ops->device());
  }
  const auto group = std::make_shared<NcclGroup>();
  group->comms.resize(ranks.size());
  check(nccl().comm_init_all(group->comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<ExpertComm>> comms;
  for (size_t r = 0; r < ranks.size(); ++r)
    comms.push_back(std::make_unique<NcclExpertComm>(group, *ranks[r], static_cast<int>(r)));
  return comms;
}

}  // namespace dsv4::cuda
