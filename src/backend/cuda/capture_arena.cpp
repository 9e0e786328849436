// CaptureArena: best-fit reuse per stream, then bump allocation from 64 MB chunks.
#include "backend/cuda/capture_arena.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace dsv4::cuda {

void* CaptureArena::allocate(size_t bytes, cudaStream_t stream) {
  if (closed_) throw UsageError("CaptureArena: the capture it served has ended");
  constexpr size_t kAlign = 256;
  bytes = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  std::multimap<size_t, void*>& free = free_[stream];
  if (auto it = free.lower_bound(bytes); it != free.end()) {
    void* block = it->second;
    free.erase(it);
    return block;
  }
  if (bytes > left_) {
    const size_t chunk = std::max(kChunkBytes, bytes);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, chunk);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw CudaError("CaptureArena: cudaMalloc of " + std::to_string(chunk) + " bytes for a graph's tensors failed: " +
                      cudaGetErrorString(err));
    }
    chunks_.emplace_back(p, [](void* q) { cudaFree(q); });
    next_ = static_cast<std::byte*>(p);
    left_ = chunk;
    reserved_ += chunk;
  }
  void* block = next_;
  next_ += bytes;
  left_ -= bytes;
  block_bytes_[block] = bytes;
  return block;
}

void CaptureArena::release(void* block, cudaStream_t stream) {
  if (closed_) return;
  free_[stream].emplace(block_bytes_.at(block), block);
}

std::vector<std::shared_ptr<void>> CaptureArena::close() {
  closed_ = true;
  free_.clear();
  block_bytes_.clear();
  return std::move(chunks_);
}

}  // namespace dsv4::cuda
