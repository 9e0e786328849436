// Scratch device memory for the length of one op: allocated and freed in stream order
// (cudaMallocAsync / cudaFreeAsync), so no synchronisation is needed; or, while a CUDA graph is
// captured, taken from and given back to the capture's arena (capture_arena.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/capture_arena.h"
#include "kernels/cuda_check.h"

namespace dsv4::cuda {

class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, cudaStream_t stream, CaptureArena* arena = nullptr) : stream_(stream), arena_(arena) {
    if (arena_ != nullptr) p_ = arena_->allocate(bytes, stream);
    else DSV4_CUDA_CHECK(cudaMallocAsync(&p_, bytes > 0 ? bytes : 1, stream));
  }
  ~StreamBuffer() {
    if (p_ == nullptr) return;
    if (arena_ != nullptr) arena_->release(p_, stream_);
    else cudaFreeAsync(p_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  StreamBuffer(StreamBuffer&& other) noexcept
      : p_(std::exchange(other.p_, nullptr)), stream_(other.stream_), arena_(other.arena_) {}
  StreamBuffer& operator=(StreamBuffer&&) = delete;

  template <typename T>
  T* get() const { return static_cast<T*>(p_); }

  // Copies `bytes` of host memory in at byte `offset`, in stream order; the host memory may be
  // reused on return (pageable memory is staged by the driver before cudaMemcpyAsync returns).
  void upload(const void* host, size_t bytes, size_t offset = 0) {
    DSV4_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice, stream_));
  }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
  CaptureArena* arena_;  // not owned; outlives the op
};

}  // namespace dsv4::cuda
