// Packing: a block per row, each packing its row with pack_entry_in_block. Unpacking: a block per
// (page, run of kUnpackEntries entries), a thread per 8 dims of an entry at a time.
#include "kernels/attention/kv_cache.h"

#include <string>

#include "core/error.h"
#include "kernels/attention/pack_entries.cuh"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kUnpackThreads = 256;
constexpr int kUnpackEntries = 32;  // a block's entries of one page

__global__ void __launch_bounds__(kPackEntryThreads) pack_cache_rows_kernel(PackRowsParams p) {
  pdl_wait();
  const int64_t r = blockIdx.x;
  const int64_t width = p.kind == PackedEntry::kFp8Attention ? Fp8CacheLayout::kHeadDim : Mxfp4KeyLayout::kDim;
  pack_entry_in_block(p.kind, p.src, r * width, p.pool, p.page_rows, r);
}

// Eight dims (chunk c) of entry `slot` as bf16: the nope dims' e4m3 codes times their block's
// scale, the rope dims as stored (two 8-byte loads: a page of an odd number of entries leaves the
// next page's entries 8-byte aligned only).
__device__ __forceinline__ uint4 fp8_entry_chunk(const uint8_t* pool, const Fp8CacheLayout& layout, int64_t slot, int c) {
  using L = Fp8CacheLayout;
  const uint8_t* data = pool + layout.data_offset(slot);
  if (8 * c < L::kNopeDim) {
    const uint2 codes = *reinterpret_cast<const uint2*>(data + 8 * c);
    return e4m3x8_to_bf16x8(codes, e8m0_value(pool[layout.scale_offset(slot) + 8 * c / L::kQuantBlock]));
  }
  const uint8_t* rope = data + L::kNopeDim + 16 * (c - L::kNopeDim / 8);
  const uint2 lo = *reinterpret_cast<const uint2*>(rope), hi = *reinterpret_cast<const uint2*>(rope + 8);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

__device__ __forceinline__ uint4 mxfp4_key_chunk(const uint8_t* pool, const Mxfp4KeyLayout& layout, int64_t slot, int c) {
  const uint32_t codes = *reinterpret_cast<const uint32_t*>(pool + layout.code_offset(slot) + 4 * c);
  return e2m1x8_to_bf16x8(codes, e8m0_value(pool[layout.scale_offset(slot) + 8 * c / Mxfp4KeyLayout::kQuantBlock]));
}

__global__ void __launch_bounds__(kUnpackThreads) unpack_cache_pages_kernel(UnpackPagesParams p) {
  pdl_wait();
  const UnpackPageJob job = p.jobs[blockIdx.x];
  const int64_t page = job.page != nullptr ? *job.page : 0;
  const bool exists = page >= 0 && page < job.num_pages;
  if (blockIdx.y == 0 && threadIdx.x == 0 && job.dst_slot != nullptr)
    *job.dst_slot = exists ? static_cast<int32_t>(job.dst_row / job.page_rows) : -1;
  const int first = static_cast<int>(blockIdx.y) * kUnpackEntries;
  if (!exists || first >= job.page_rows) return;
  const int entries = min(kUnpackEntries, job.page_rows - first);
  const bool attention = p.kind == PackedEntry::kFp8Attention;
  const int width = attention ? Fp8CacheLayout::kHeadDim : Mxfp4KeyLayout::kDim, chunks = width / 8;
  for (int i = static_cast<int>(threadIdx.x); i < entries * chunks; i += kUnpackThreads) {
    const int e = first + i / chunks, c = i % chunks;
    const int64_t slot = page * job.page_rows + e;
    const uint4 v = attention ? fp8_entry_chunk(job.pool, Fp8CacheLayout{job.page_rows}, slot, c)
                              : mxfp4_key_chunk(job.pool, Mxfp4KeyLayout{job.page_rows}, slot, c);
    *reinterpret_cast<uint4*>(p.rows + (job.dst_row + e) * width + 8 * c) = v;
  }
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

void unpack_cache_pages(const UnpackPagesParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  if (p.kind == PackedEntry::kNone || p.max_page_rows <= 0 || p.count > 2147483647)
    throw UsageError("unpack_cache_pages: " + std::to_string(p.count) + " pages of up to " +
                     std::to_string(p.max_page_rows) + " entries" +
                     (p.kind == PackedEntry::kNone ? " of no packed kind" : ""));
  const dim3 grid(static_cast<unsigned>(p.count), static_cast<unsigned>((p.max_page_rows + kUnpackEntries - 1) / kUnpackEntries));
  launch_pdl(unpack_cache_pages_kernel, grid, kUnpackThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
