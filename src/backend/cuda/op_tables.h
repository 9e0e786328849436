// The host tables an op's kernels read (per-sequence descriptors, work lists, pointer arrays),
// packed into one buffer and copied to the device in one piece (CudaOps::upload_tables): in stream
// order for an eager launch, or, while a CUDA graph is being captured, once into device memory the
// graph keeps, so the graph's kernels read the same tables at every replay. Tables must therefore
// hold nothing that changes from one decode step to the next (positions are read on the device).
#pragma once

#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "backend/cuda/stream_buffer.h"

namespace dsv4::cuda {

class TableBytes {
 public:
  // Appends the items at a 16-byte aligned offset and returns that offset.
  template <typename T>
  size_t add(std::span<const T> items) {
    const size_t offset = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(offset + items.size_bytes());
    if (!items.empty()) std::memcpy(bytes_.data() + offset, items.data(), items.size_bytes());
    return offset;
  }
  template <typename T>
  size_t add(const std::vector<T>& items) { return add(std::span<const T>(items)); }
  const std::byte* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<std::byte> bytes_;
};

// The device copy of a TableBytes; valid until the op that uploaded it has enqueued its kernels
// (an eager copy is freed in stream order after them).
class DeviceTables {
 public:
  template <typename T>
  const T* at(size_t offset) const { return reinterpret_cast<const T*>(base_ + offset); }

 private:
  friend class CudaOps;
  std::optional<StreamBuffer> eager_;
  const std::byte* base_ = nullptr;
};

}  // namespace dsv4::cuda
