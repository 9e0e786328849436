// Moving rows between the bf16 form and the packed cache entries of kv/packed_entries.h on the
// device: packing row r into entry r of one run of pages (how sparse attention over packed
// caches reads a batch's own window rows in the same form as the cached ones; CudaOps::
// write_cache_rows packs into block-table pages with the same per-row code,
// kernels/attention/pack_entries.cuh), and unpacking whole pages back into bf16 rows (how a
// prefill launch reads packed caches: once a launch, not once a tile that reads them).
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

// One page of packed entries to unpack: its page_rows entries become bf16 rows dst_row ..
// dst_row + page_rows - 1 of UnpackPagesParams::rows.
struct UnpackPageJob {
  const uint8_t* pool = nullptr;  // the source pool's pages
  const int32_t* page = nullptr;  // device: the source page's id (a slot of a block table); nullptr: page 0
  int64_t num_pages = 0;          // the source pool's pages: an id outside [0, num_pages) is no page
  int64_t dst_row = 0;
  int32_t* dst_slot = nullptr;    // device or nullptr: gets dst_row / page_rows (a page id of the
                                  // rows' pages), or -1 where the source page does not exist
  int32_t page_rows = 0;
};

struct UnpackPagesParams {
  const UnpackPageJob* jobs = nullptr;  // device
  int64_t count = 0;
  int64_t max_page_rows = 0;            // the most page_rows of any job
  PackedEntry kind = PackedEntry::kFp8Attention;
  uint16_t* rows = nullptr;             // bf16 [.., 512] (kFp8Attention) or [.., 128] (kMxfp4Key)
};

// The jobs' pages as the bf16 values decode_fp8_entry / decode_mxfp4_key give (the conversions
// the attention and indexer kernels unpack their tiles with, so the same bits). Rows of a page
// that does not exist are left as they were.
void unpack_cache_pages(const UnpackPagesParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
