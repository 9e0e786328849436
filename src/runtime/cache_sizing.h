// Sizing the serving engine's caches from the device's memory, as vLLM's --gpu-memory-utilization
// does: the caches may take utilization x the device's total, less the memory in use once the
// weights are loaded, the activations of the largest step at their peak and (with prefix caching)
// the state snapshots the engine keeps beside the caches. The engine measures the numbers
// (engine.cpp: a profiled step on the device); the arithmetic is here, apart, to be tested alone.
#pragma once

#include <cstdint>

namespace dsv4 {

// What the caches' share of the device comes from.
struct GpuMemoryBudget {
  double utilization = 0;        // the share of the device the engine may fill, in (0, 1]
  int64_t total_bytes = 0;       // the device's memory
  int64_t used_bytes = 0;        // in use once the weights are loaded: the weights, the rest of this
                                 // process's device memory and other processes'
  int64_t activation_bytes = 0;  // the largest step's activations at their peak, beyond used_bytes
  int64_t snapshot_bytes = 0;    // prefix caching's state snapshots at their most (beside the caches)
};

// What the caches must hold at least: one sequence of max_model_len beside the fixed-size state of
// every sequence that may run at once.
struct CacheFootprint {
  int64_t fixed_bytes = 0;    // max_num_seqs sequences' fixed-size state (SequenceCache::fixed_bytes)
  int64_t block_bytes = 0;    // one cache block's pages (CachePool::block_bytes)
  int64_t block_size = 0;     // tokens per block
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 0;
};

// floor(utilization x total) - used - activations - snapshots: the bytes the caches may take
// (EngineConfig::cache_memory_bytes). UsageError naming --gpu-memory-utilization when utilization
// is outside (0, 1]; when the memory in use and the activations leave nothing (with the bytes in
// use and the total); when what is left holds less than one sequence of max_model_len beside the
// fixed state (with the longest max_model_len it would hold, suggesting a lower --max-model-len or
// a higher --gpu-memory-utilization, as vLLM does).
int64_t cache_memory_from_utilization(const GpuMemoryBudget& budget, const CacheFootprint& footprint);

}  // namespace dsv4
