// Tensors on the host: a non-owning view (pointer + dtype + shape, row-major contiguous) and an
// owning, 64-byte aligned buffer that hands out views. Device tensors reuse the same view type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[4, 512]"

// A row-major contiguous tensor that someone else owns. `Byte` is std::byte or const std::byte.
template <typename Byte>
class BasicTensorView {
 public:
  BasicTensorView() = default;
  BasicTensorView(Byte* data, DType dtype, Shape shape)
      : data_(data), dtype_(dtype), shape_(std::move(shape)) {}
  // A mutable view converts to a read-only one.
  template <typename Other>
    requires(std::is_const_v<Byte> && !std::is_const_v<Other>)
  BasicTensorView(const BasicTensorView<Other>& o)  // NOLINT(google-explicit-constructor)
      : data_(o.bytes()), dtype_(o.dtype()), shape_(o.shape()) {}

  Byte* bytes() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Typed access; the caller picks T to match dtype() (uint16_t for bf16, uint8_t for fp8...).
  template <typename T>
  auto data() const {
    using Ptr = std::conditional_t<std::is_const_v<Byte>, const T*, T*>;
    return reinterpret_cast<Ptr>(data_);
  }
  template <typename T>
  auto span() const {
    using Elem = std::conditional_t<std::is_const_v<Byte>, const T, T>;
    return std::span<Elem>(data<T>(), static_cast<size_t>(numel()));
  }

 private:
  Byte* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

using TensorView = BasicTensorView<std::byte>;
using ConstTensorView = BasicTensorView<const std::byte>;

// Host values at `values` seen as a tensor of `dtype` and `shape`: read-only for const values
// (what an upload takes), writable otherwise (what a download fills); the caller matches T to
// dtype, as for data<T>().
template <typename T>
ConstTensorView host_view(const T* values, DType dtype, Shape shape) {
  return {reinterpret_cast<const std::byte*>(values), dtype, std::move(shape)};
}
template <typename T>
TensorView host_view(T* values, DType dtype, Shape shape) {
  return {reinterpret_cast<std::byte*>(values), dtype, std::move(shape)};
}

// An owning host tensor, zero-initialised, 64-byte aligned.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  TensorView view() { return {data_.get(), dtype_, shape_}; }
  ConstTensorView view() const { return {data_.get(), dtype_, shape_}; }
  template <typename T>
  T* data() { return reinterpret_cast<T*>(data_.get()); }
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(data_.get()); }
  template <typename T>
  std::span<T> span() { return {data<T>(), static_cast<size_t>(numel())}; }
  template <typename T>
  std::span<const T> span() const { return {data<T>(), static_cast<size_t>(numel())}; }

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::unique_ptr<std::byte[], AlignedFree> data_;
};

}  // namespace dsv4
