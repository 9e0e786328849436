// Device memory brought into L2 ahead of the kernels that read it: a decode step's weights,
// prefetched while kernels that move few bytes run (docs/PERF.md, session 55).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::kernels {

struct L2PrefetchRange {
  const void* data = nullptr;  // 16-byte aligned
  int64_t bytes = 0;           // the whole 16-byte units are prefetched (a shorter tail is not)
};

inline constexpr int kL2PrefetchMaxRanges = 4;

struct L2PrefetchParams {
  L2PrefetchRange ranges[kL2PrefetchMaxRanges];
  int count = 0;
};

// Hopper's bulk prefetch (cp.async.bulk.prefetch.L2) of each range: a hint that nothing waits on;
// the kernel ends once its prefetches are issued. Throws UsageError for more than
// kL2PrefetchMaxRanges ranges or a range not 16-byte aligned.
void l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
