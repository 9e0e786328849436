// A random checkpoint written tensor by tensor through ShardedWriter, and its size arithmetic.
#include "loader/synthetic_checkpoint.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/safetensors.h"
#include "loader/synthetic_weights.h"
#include "loader/weights.h"

namespace dsv4 {

namespace {

constexpr uint64_t kHeaderAllowancePerTensor = 256;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

std::string gb(uint64_t bytes) {
  const uint64_t tenths = (bytes + 50'000'000) / 100'000'000;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " GB";
}

}  // namespace

uint64_t synthetic_checkpoint_disk_bytes(const ModelConfig& cfg) {
  const std::vector<ExpectedTensor> list = expected_tensors(cfg);
  uint64_t total = 0;
  for (const ExpectedTensor& t : list)
    total += static_cast<uint64_t>(shape_numel(t.spec.shape)) * dtype_size(t.spec.dtype) +
             kHeaderAllowancePerTensor;
  return total;
}

uint64_t default_shard_bytes(uint64_t total_bytes) {
  return std::clamp<uint64_t>(total_bytes / 16, 16 * kMiB, 5 * kGiB);
}

void check_disk_space(uint64_t needed, uint64_t available, const std::filesystem::path& dir) {
  if (available >= needed) return;
  throw UsageError(dir.string() + ": not enough disk space: the checkpoint needs " +
                   std::to_string(needed) + " bytes (" + gb(needed) + "), the file system has " +
                   std::to_string(available) + " bytes (" + gb(available) + ") available");
}

SyntheticCheckpointSummary write_synthetic_checkpoint(const ModelConfig& cfg,
                                                      const std::filesystem::path& dir,
                                                      const SyntheticCheckpointOptions& options) {
  const std::vector<ExpectedTensor> list = expected_tensors(cfg);
  std::vector<TensorSpec> specs;
  specs.reserve(list.size());
  WriteProgress progress{0, list.size(), 0, 0};
  for (const ExpectedTensor& t : list) {
    specs.push_back(t.spec);
    progress.bytes_total += static_cast<uint64_t>(shape_numel(t.spec.shape)) * dtype_size(t.spec.dtype);
  }
  const uint64_t shard_bytes =
      options.max_shard_bytes ? options.max_shard_bytes : default_shard_bytes(progress.bytes_total);
  ShardedWriter writer(dir, std::move(specs), shard_bytes);

  auto done = [&](const Tensor& t) {
    ++progress.tensors_done;
    progress.bytes_done += t.nbytes();
    if (options.progress) options.progress(progress);
  };
  for (size_t i = 0; i < list.size(); ++i) {
    const ExpectedTensor& entry = list[i];
    SyntheticTensor values = synthesize_tensor(cfg, entry, options.seed);
    writer.write(entry.spec.name, values.data.view());
    done(values.data);
    if (values.scale) {  // the weight's ".scale" is the next entry
      ++i;
      writer.write(list.at(i).spec.name, values.scale->view());
      done(*values.scale);
    }
  }
  writer.finish();
  return {list.size(), progress.bytes_done, writer.num_shards()};
}

}  // namespace dsv4
