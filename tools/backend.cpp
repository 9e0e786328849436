// The backend factory behind `--device` and `--multi-stream`. The CUDA backend exists only in builds configured with
// CUDA (DSV4_WITH_CUDA); the tools are the one place that may branch on that.
#include "tools/backend.h"

#include <string>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#if defined(DSV4_WITH_CUDA)
#include "backend/cuda/cuda_ops.h"
#endif

namespace dsv4::tools {

void add_device_option(CLI::App* cmd, Device& device) {
  cmd->add_option_function<std::string>(
         "--device", [&device](const std::string& name) { device = name == "cuda" ? Device::kCuda : Device::kCpu; },
         "Compute backend: cpu (the reference) or cuda (an NVIDIA GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->default_str("cpu");
}

void add_multi_stream_option(CLI::App* cmd, MultiStreamPolicy& policy) {
  const MultiStreamPolicy defaults;
  cmd->add_option_function<std::string>(
         "--multi-stream",
         [&policy](const std::string& name) {
           for (const MultiStreamMode mode : {MultiStreamMode::kOff, MultiStreamMode::kOn, MultiStreamMode::kAuto})
             if (multi_stream_mode_name(mode) == name) policy.mode = mode;
         },
         "--device cuda: run the attention layer's independent input chains (compressor, indexer keys) "
         "on side CUDA streams beside the Q/KV path: off, on, or auto (side streams for forwards of at "
         "most " + std::to_string(defaults.auto_max_tokens) +
             " tokens). The numbers are the same in every mode")
      ->check(CLI::IsMember({"off", "on", "auto"}))
      ->default_str(std::string(multi_stream_mode_name(defaults.mode)));
}

std::unique_ptr<Ops> make_backend(Device device, int threads, MultiStreamPolicy multi_stream) {
  if (device == Device::kCpu) return std::make_unique<cpu::CpuOps>(threads);
#if defined(DSV4_WITH_CUDA)
  cuda::CudaOptions options;
  options.multi_stream = multi_stream;
  return std::make_unique<cuda::CudaOps>(options);
#else
  (void)multi_stream;
  throw UsageError("--device cuda: this build of dsv4 has no CUDA backend (configure with -DDSV4_CUDA=ON)");
#endif
}

}  // namespace dsv4::tools
