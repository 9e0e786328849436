// Making the ranks of `serve` and `bench throughput` from the parallel flags.
#include "tools/engine_ranks.h"

#include <algorithm>
#include <string>
#include <thread>

#include "core/error.h"

namespace dsv4::tools {

std::vector<EngineRank> EngineRanks::ranks() const {
  std::vector<EngineRank> out;
  for (size_t r = 0; r < models.size(); ++r)
    out.push_back({&models[r], backends[r].get(), group.empty() ? nullptr : group[r].get()});
  return out;
}

EngineRanks make_engine_ranks(Device device, int threads, const GpuOptions& gpu, bool exact_math,
                              const ModelSource& source) {
  EngineRanks ranks;
  const int n = gpu.data_parallel_size;
  if (n <= 1) {
    ranks.backends.push_back(make_backend(device, threads, gpu, exact_math));
    ranks.models.push_back(load_model(*ranks.backends.front(), source));
    ranks.runner = make_forward_runner(*ranks.backends.front(), gpu);
    return ranks;
  }
  const std::string flag = "--data-parallel-size " + std::to_string(n);
  if (!gpu.expert_parallel)
    throw UsageError(flag + " needs --enable-expert-parallel: dsv4 spreads the MoE layers over the ranks by "
                     "experts only (each rank holds 1/" + std::to_string(n) + " of them)");
  if (device == Device::kCuda)
    throw UsageError(flag + " --device cuda: the CUDA backend's expert exchange (NCCL) is not built yet; "
                     "--device cpu runs the ranks");
  GpuOptions one_device = gpu;
  one_device.data_parallel_size = 1;
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int per_rank = std::max(1, (threads > 0 ? threads : machine) / n);
  ranks.group = in_process_expert_group(n);
  for (int r = 0; r < n; ++r) {
    ranks.backends.push_back(make_backend(device, per_rank, one_device, exact_math));
    ranks.models.push_back(load_model(*ranks.backends.back(), source, {r, n}));
  }
  return ranks;
}

}  // namespace dsv4::tools
