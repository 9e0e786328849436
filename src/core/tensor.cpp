// Shape helpers and the owning host Tensor's aligned allocation.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace dsv4 {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void Tensor::AlignedFree::operator()(std::byte* p) const { std::free(p); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_)
    if (d < 0) throw UsageError("tensor shape " + shape_str(shape_) + " has a negative dimension");
  constexpr size_t kAlign = 64;
  const size_t bytes = nbytes();
  const size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, padded == 0 ? kAlign : padded));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, padded == 0 ? kAlign : padded);
  data_.reset(p);
}

}  // namespace dsv4
