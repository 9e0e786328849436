// Once per device: function attributes (a kernel's dynamic shared memory limit) belong to one
// device, so a process running ranks on several GPUs must set them on each.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <utility>

#include "kernels/cuda_check.h"

namespace dsv4::kernels {

inline constexpr int kMaxDevices = 64;
using PerDeviceOnce = std::array<std::once_flag, kMaxDevices>;

// Runs `set` once per device (the calling thread's current one) for the call site whose `flags`
// these are.
template <typename Set>
void once_per_device(PerDeviceOnce& flags, Set&& set) {
  int device = 0;
  DSV4_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(flags.at(static_cast<size_t>(device)), std::forward<Set>(set));
}

}  // namespace dsv4::kernels
