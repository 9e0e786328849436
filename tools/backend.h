// Choosing the compute backend of a command: `--device cpu|cuda`, and making that backend.
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

#include "ops/ops.h"

namespace dsv4::tools {

enum class Device { kCpu, kCuda };

// Adds `--device cpu|cuda` (default cpu) to `cmd`.
void add_device_option(CLI::App* cmd, Device& device);

// The backend for `device`; `threads` is the CPU backend's thread count (0: all cores). Throws
// UsageError for cuda when this build has no CUDA backend, CudaError when no GPU can be used.
std::unique_ptr<Ops> make_backend(Device device, int threads);

}  // namespace dsv4::tools
