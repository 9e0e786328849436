// Packing rows into the packed cache entries of kv/packed_entries.h on the device, row r into
// entry r of one run of pages: how sparse attention over packed caches reads a batch's own window
// rows in the same form as the cached ones (CudaOps::write_cache_rows packs into block-table
// pages with the same per-row code, kernels/attention/pack_entries.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"
#include "kv/packed_entries.h"

namespace dsv4::kernels {

struct PackRowsParams {
  FloatPtr src;             // [rows, 512] (kFp8Attention) or [rows, 128] (kMxfp4Key)
  int64_t rows = 0;
  PackedEntry kind = PackedEntry::kFp8Attention;
  uint8_t* pool = nullptr;  // pages of page_rows entries holding at least `rows`
  int page_rows = 0;
};

void pack_cache_rows(const PackRowsParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
