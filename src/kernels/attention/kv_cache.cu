// A block per row, each packing its row with pack_entry_in_block.
#include "kernels/attention/kv_cache.h"

#include <string>

#include "core/error.h"
#include "kernels/attention/pack_entries.cuh"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

__global__ void __launch_bounds__(kPackEntryThreads) pack_cache_rows_kernel(PackRowsParams p) {
  pdl_wait();
  const int64_t r = blockIdx.x;
  const int64_t width = p.kind == PackedEntry::kFp8Attention ? Fp8CacheLayout::kHeadDim : Mxfp4KeyLayout::kDim;
  pack_entry_in_block(p.kind, p.src, r * width, p.pool, p.page_rows, r);
}

}  // namespace

void pack_cache_rows(const PackRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.kind == PackedEntry::kNone || p.page_rows <= 0 || p.rows > 2147483647)
    throw UsageError("pack_cache_rows: " + std::to_string(p.rows) + " rows into pages of " + std::to_string(p.page_rows) +
                     (p.kind == PackedEntry::kNone ? " entries of no packed kind" : " entries"));
  launch_pdl(pack_cache_rows_kernel, static_cast<unsigned>(p.rows), kPackEntryThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
