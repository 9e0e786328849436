// Writing a whole random checkpoint of a ModelConfig in the released format (the tensors of
// expected_tensors(), filled by synthesize_tensor, in sharded safetensors with an index), and the
// size arithmetic `dsv4 make-model` checks against the free disk space first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>

#include "config/model_config.h"

namespace dsv4 {

// Bytes a synthetic checkpoint of `cfg` takes on disk: the tensor data plus an allowance of 256
// bytes per tensor for the safetensors headers and the index.
uint64_t synthetic_checkpoint_disk_bytes(const ModelConfig& cfg);

// The shard size make-model uses for a checkpoint of `total_bytes`: total/16, at least 16 MiB and
// at most 5 GiB, so even `tiny` spans several shards and full models get ~5 GB files.
uint64_t default_shard_bytes(uint64_t total_bytes);

// Throws UsageError naming `dir`, the bytes needed and the bytes available when they do not fit.
void check_disk_space(uint64_t needed, uint64_t available, const std::filesystem::path& dir);

struct WriteProgress {
  size_t tensors_done = 0;
  size_t tensors_total = 0;
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
};

struct SyntheticCheckpointOptions {
  uint64_t seed = 0;
  uint64_t max_shard_bytes = 0;                       // 0: default_shard_bytes(total)
  std::function<void(const WriteProgress&)> progress;  // called after every tensor, may be empty
};

struct SyntheticCheckpointSummary {
  size_t tensors = 0;
  uint64_t bytes = 0;  // tensor data
  size_t shards = 0;
};

// Writes the model-*.safetensors shards and model.safetensors.index.json into `dir` (which must
// exist). Each shard is renamed from its .partial file when complete and the index comes last, so
// an interrupted run never leaves a checkpoint that looks complete.
SyntheticCheckpointSummary write_synthetic_checkpoint(const ModelConfig& cfg,
                                                      const std::filesystem::path& dir,
                                                      const SyntheticCheckpointOptions& options);

}  // namespace dsv4
