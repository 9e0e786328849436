// l2_prefetch's kernel (see l2_prefetch.h): each thread issues bulk prefetches of kChunkBytes
// pieces of the ranges, strided over the grid. Written by hand: no library issues L2 prefetches
// of arbitrary device memory.
#include "kernels/l2_prefetch.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kBlocks = 4;
constexpr int64_t kChunkBytes = 16 * 1024;

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(L2PrefetchParams p) {
  const int64_t thread = int64_t{blockIdx.x} * kThreads + threadIdx.x, threads = int64_t{gridDim.x} * kThreads;
  for (int r = 0; r < p.count; ++r) {
    const auto* const base = static_cast<const char*>(p.ranges[r].data);
    const int64_t bytes = p.ranges[r].bytes / 16 * 16;
    for (int64_t at = thread * kChunkBytes; at < bytes; at += threads * kChunkBytes) {
      const auto size = static_cast<uint32_t>(bytes - at < kChunkBytes ? bytes - at : kChunkBytes);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(base + at), "r"(size) : "memory");
    }
  }
}

}  // namespace

void l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream) {
  if (p.count < 0 || p.count > kL2PrefetchMaxRanges)
    throw UsageError("l2_prefetch: " + std::to_string(p.count) + " ranges, at most " +
                     std::to_string(kL2PrefetchMaxRanges));
  for (int r = 0; r < p.count; ++r)
    if (!aligned16(p.ranges[r].data))
      throw UsageError("l2_prefetch: range " + std::to_string(r) + " is not 16-byte aligned");
  if (p.count == 0) return;
  l2_prefetch_kernel<<<kBlocks, kThreads, 0, stream>>>(p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
