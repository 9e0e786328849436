// CudaGraph: launching an instantiated graph and releasing it with its tables.
#include "backend/cuda/cuda_graph.h"

#include "kernels/cuda_check.h"

namespace dsv4::cuda {

CudaGraph::CudaGraph(cudaGraphExec_t exec, size_t nodes, std::vector<std::shared_ptr<void>> tables)
    : exec_(exec), tables_(std::move(tables)), nodes_(nodes) {}

// Errors cannot be reported from a destructor. A run still queued keeps the executable graph's
// resources alive until it ends; the tables are device memory its kernels read, so the device is
// waited for before they go.
CudaGraph::~CudaGraph() {
  cudaDeviceSynchronize();
  cudaGraphExecDestroy(exec_);
}

void CudaGraph::launch(cudaStream_t stream) const { DSV4_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

}  // namespace dsv4::cuda
