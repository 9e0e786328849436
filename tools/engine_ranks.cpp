// Making the ranks of `serve`, `bench throughput` and `bench step` from the parallel flags.
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

std::vector<std::unique_ptr<Ops>> make_rank_backends(Device device, int threads, const GpuOptions& gpu,
                                                     bool exact_math) {
  const int n = gpu.data_parallel_size;
  std::vector<std::unique_ptr<Ops>> backends;
  if (n <= 1) {
    backends.push_back(make_backend(device, threads, gpu, exact_math));
    return backends;
  }
  const std::string flag = "--data-parallel-size " + std::to_string(n);
  if (!gpu.expert_parallel)
    throw UsageError(flag + " needs --enable-expert-parallel: dsv4 spreads the MoE layers over the ranks by "
                     "experts only (each rank holds 1/" + std::to_string(n) + " of them)");
  GpuOptions one_device = gpu;
  one_device.data_parallel_size = 1;
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int per_rank = std::max(1, (threads > 0 ? threads : machine) / n);
  for (int r = 0; r < n; ++r) backends.push_back(make_backend(device, per_rank, one_device, exact_math, r));
  return backends;
}

std::vector<std::unique_ptr<ExpertComm>> make_expert_group(std::span<const std::unique_ptr<Ops>> backends) {
  std::vector<Ops*> ops;
  for (const std::unique_ptr<Ops>& b : backends) ops.push_back(b.get());
  return expert_group_for(ops);
}

EngineRanks make_engine_ranks(Device device, int threads, const GpuOptions& gpu, bool exact_math,
                              const ModelSource& source) {
  EngineRanks ranks;
  ranks.backends = make_rank_backends(device, threads, gpu, exact_math);
  const auto n = static_cast<int>(ranks.backends.size());
  for (int r = 0; r < n; ++r) {
    ranks.backends[static_cast<size_t>(r)]->bind_thread();  // a rank's weights on its own device
    ranks.models.push_back(load_model(*ranks.backends[static_cast<size_t>(r)], source, {r, n}));
  }
  if (n == 1) ranks.runner = make_forward_runner(*ranks.backends.front(), gpu);
  else ranks.group = make_expert_group(ranks.backends);
  return ranks;
}

}  // namespace dsv4::tools
