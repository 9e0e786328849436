// The backend factory behind `--device`. The CUDA backend exists only in builds configured with
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

std::unique_ptr<Ops> make_backend(Device device, int threads) {
  if (device == Device::kCpu) return std::make_unique<cpu::CpuOps>(threads);
#if defined(DSV4_WITH_CUDA)
  return std::make_unique<cuda::CudaOps>();
#else
  throw UsageError("--device cuda: this build of dsv4 has no CUDA backend (configure with -DDSV4_CUDA=ON)");
#endif
}

}  // namespace dsv4::tools
