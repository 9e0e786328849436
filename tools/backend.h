// Choosing the compute backend of a command: `--device cpu|cuda`, `--multi-stream`, and making that
// backend.
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

#include "ops/fork_join.h"
#include "ops/ops.h"

namespace dsv4::tools {

enum class Device { kCpu, kCuda };

// Adds `--device cpu|cuda` (default cpu) to `cmd`.
void add_device_option(CLI::App* cmd, Device& device);

// Adds `--multi-stream off|on|auto` (default auto) to `cmd`: whether the CUDA backend overlaps the
// attention layer's independent input chains on side streams.
void add_multi_stream_option(CLI::App* cmd, MultiStreamPolicy& policy);

// The backend for `device`; `threads` is the CPU backend's thread count (0: all cores),
// `multi_stream` the CUDA backend's side-stream policy (the CPU always runs fork/joins in order).
// Throws UsageError for cuda when this build has no CUDA backend, CudaError when no GPU can be used.
std::unique_ptr<Ops> make_backend(Device device, int threads, MultiStreamPolicy multi_stream = {});

}  // namespace dsv4::tools
