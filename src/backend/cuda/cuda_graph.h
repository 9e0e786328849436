// An instantiated CUDA graph (CudaOps::end_capture) and the device tables its kernels read, which
// live as long as it does.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

namespace dsv4::cuda {

class CudaGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, size_t nodes, std::vector<std::shared_ptr<void>> tables);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Enqueues one run of the graph on `stream`.
  void launch(cudaStream_t stream) const;
  // Nodes of the graph: kernels, copies, memsets, allocations and frees, event waits.
  size_t nodes() const { return nodes_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
  std::vector<std::shared_ptr<void>> tables_;
  size_t nodes_ = 0;
};

}  // namespace dsv4::cuda
