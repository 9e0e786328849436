// Device memory for the tensors and scratch of a forward being captured into a CUDA graph
// (CudaOps::begin_capture), in place of stream-ordered allocations: those would become allocation
// and free nodes of the graph, and such nodes between two kernels keep the second from being
// launched programmatically (kernels/launch.cuh) while the first finishes. Blocks come from large
// chunks that the graph keeps for its lifetime. A freed block is reused only by later allocations
// on the stream it was freed on: the graph orders those after every use of the block, by the same
// argument that makes CudaOps's stream-ordered frees safe (cuda_ops.cpp), one stream at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

namespace dsv4::cuda {

class CaptureArena {
 public:
  // A block of at least `bytes` (256-byte aligned) for use on `stream`.
  void* allocate(size_t bytes, cudaStream_t stream);
  // Gives a block back; `stream` is the stream current when its last user died.
  void release(void* block, cudaStream_t stream);
  // The chunks, for the graph to keep; releases after this are ignored and allocate is refused.
  std::vector<std::shared_ptr<void>> close();
  size_t reserved_bytes() const { return reserved_; }

 private:
  static constexpr size_t kChunkBytes = size_t{64} << 20;
  std::vector<std::shared_ptr<void>> chunks_;
  std::byte* next_ = nullptr;  // the unused rest of the newest chunk
  size_t left_ = 0;
  std::unordered_map<void*, size_t> block_bytes_;
  std::map<cudaStream_t, std::multimap<size_t, void*>> free_;  // per stream, by size
  size_t reserved_ = 0;
  bool closed_ = false;
};

}  // namespace dsv4::cuda
