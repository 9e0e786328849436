// Launchers for the elementwise and per-row ops of CudaOps: dtype-converting copy, embedding
// gather, broadcast add, RMSNorm, RoPE, block fake-quantisation and the Hadamard transform. All
// math is fp32 with core/numeric.h's roundings and the CPU backend's operation order, so results
// equal CpuOps' bit for bit except where noted (RMSNorm's sum of squares).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fault.h"
#include "kernels/float_ptr.h"
#include "kv/packed_entries.h"
#include "kv/page_table.h"

namespace dsv4::kernels {

// dst[i] = src[i] rounded to dst's type.
struct ConvertCopyParams {
  FloatPtr src;      // [n]
  MutFloatPtr dst;   // [n]
  int64_t n = 0;
};
void convert_copy(const ConvertCopyParams& p, cudaStream_t stream);

// One contiguous device-to-device copy of `bytes` bytes.
struct ByteRange {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
};
// Copies `count` ranges (ranges: a device array) in one launch, a block per range, in 16-byte
// words where source, destination and length allow. The ranges must not overlap.
void copy_byte_ranges(const ByteRange* ranges, int64_t count, cudaStream_t stream);

// A sequence's paged cache for write_cache_rows: entry j is pool row pool_row(table, j)
// (kv/page_table.h; the table is plan data in device memory), a copy of the source row's
// row_bytes bytes, or with `packed` the row packed as kv/packed_entries.h lays out its pages.
struct CacheRowTarget {
  void* pool = nullptr;   // [num_pages * page_rows, row_bytes], or packed pages
  PageTable table;
  PackedEntry packed = PackedEntry::kNone;
};
// Source row r goes to entry dst_rows[r] of caches[seq_of_row[r]]; rows with seq_of_row < 0, a
// negative destination or an entry without a pool row (-1 page, past the table, outside the
// pool) are skipped. A block per source row.
struct WriteCacheRowsKernelParams {
  const void* src = nullptr;             // [rows, row_bytes]
  bool src_bf16 = false;                 // for packed targets: the source's values are bf16 (else fp32)
  const int32_t* dst_rows = nullptr;     // [rows] device
  const int32_t* seq_of_row = nullptr;   // [rows] device
  const CacheRowTarget* caches = nullptr;  // device
  int64_t rows = 0;
  int64_t row_bytes = 0;
};
void write_cache_rows(const WriteCacheRowsKernelParams& p, cudaStream_t stream);

// out[t, j, :] = table[ids[t], :] rounded to out's type, for every stream j. An id outside
// [0, vocab) gives zeros and sets fault[0] = kFaultTokenId (if still 0) and fault[1] = the id.
struct EmbedGatherParams {
  const int32_t* ids = nullptr;  // [tokens]
  FloatPtr table;                // [vocab, dim]
  int64_t vocab = 0;
  int32_t* fault = nullptr;      // [2] device-visible
  MutFloatPtr out;               // [tokens, streams, dim]
  int64_t tokens = 0;
  int64_t streams = 0;
  int64_t dim = 0;
};
void embed_gather(const EmbedGatherParams& p, cudaStream_t stream);

// out[t, j, :] = a[t, j, :] + b[t, :]
struct BroadcastAddParams {
  FloatPtr a;        // [tokens, streams, dim]
  FloatPtr b;        // [tokens, dim]
  MutFloatPtr out;   // [tokens, streams, dim]; may alias a
  int64_t tokens = 0;
  int64_t streams = 0;
  int64_t dim = 0;
};
void broadcast_add(const BroadcastAddParams& p, cudaStream_t stream);

// y = w * (x * (1 / sqrt(mean(x^2) + eps))) per row (w absent: 1). One block per row; the sum of
// squares is a block reduction (fixed order per row, not the CPU's order: last-bit differences).
struct RmsNormRowsParams {
  FloatPtr x;        // [rows, dim]
  // [dim], or data nullptr for the weight-free norm. Decode-sized calls read it before they wait
  // for the kernel launched before them (programmatic dependent launch): that kernel must not write it.
  FloatPtr weight;
  MutFloatPtr y;     // [rows, dim]; may alias x
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 0;
};
void rms_norm_rows(const RmsNormRowsParams& p, cudaStream_t stream);

// The threads of rms_norm_rows' block for rows of `dim` (about four values a thread, 32..1024),
// which fix the order of a row's sum of squares (kernels that fuse the norm add in this order).
__host__ __device__ constexpr int64_t rms_norm_block_threads(int64_t dim) {
  const int64_t threads = (dim / 4 + 31) / 32 * 32;
  return threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
}

// In place: x[r, h, hd - rope_dim + 2i .. +1] rotated by angle positions[r] * inv_freq[i] (fp32
// product; cos and sin in double, rounded to fp32, as the CPU does), sin negated when inverse.
// positions and inv_freq are read before the kernel waits for the kernel launched before it
// (programmatic dependent launch): that kernel must not write them.
struct RopeRowsParams {
  MutFloatPtr x;                // [rows, heads, head_dim]
  const int32_t* positions = nullptr;  // [rows]
  const float* inv_freq = nullptr;     // [rope_dim / 2]
  int64_t rows = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rope_dim = 0;         // even, <= head_dim
  bool inverse = false;
};
void rope_rows(const RopeRowsParams& p, cudaStream_t stream);

// In place: x[r, b*block .. ] for the blocks covering x[r, 0:cols] takes its value after a round
// trip through e4m3 (e2m1 when e2m1) with the pow2 block scale of core/quant.h. A last block
// shorter than `block` (cols not a multiple) is its own block. One warp per (row, block).
struct QuantSimRowsParams {
  MutFloatPtr x;     // [rows, width]
  int64_t rows = 0;
  int64_t width = 0;
  int64_t cols = 0;  // <= width
  int64_t block = 0;
  bool e2m1 = false;
};
void quant_sim_rows(const QuantSimRowsParams& p, cudaStream_t stream);

// In place: x[r, :] <- H x[r, :] * scale, H the Sylvester-order Hadamard matrix, by the same
// butterflies as the CPU (stage by stage, a + b and a - b), so bit-identical.
struct HadamardRowsParams {
  MutFloatPtr x;     // [rows, width]
  int64_t rows = 0;
  int64_t width = 0;  // a power of two, at most kHadamardMaxWidth
  float scale = 0;    // 1 / sqrt(width) rounded to fp32
};
constexpr int64_t kHadamardMaxWidth = 8192;  // the row lives in shared memory (32 KiB)
void hadamard_rows(const HadamardRowsParams& p, cudaStream_t stream);

// rms_norm_rows, rope_rows, hadamard_rows and quant_sim_rows over vectors of dim values, each
// step optional and in that order, after y = src rounded to y's dtype: one launch of a block a
// vector where norm_rope_quant_fits, each step's arithmetic and roundings as its own kernel's (the
// norm's sum in rms_norm_block_threads(dim) threads' order), so the same bits.
struct NormRopeQuantRowsParams {
  FloatPtr src;                        // [vectors, dim]
  MutFloatPtr y;                       // [vectors, dim]; may alias src
  int64_t vectors = 0;                 // rows * heads
  int64_t heads = 1;                   // vectors a position: vector v rotates at positions[v / heads]
  int64_t dim = 0;
  bool norm = false;
  FloatPtr norm_weight;                // [dim], or data nullptr; read before the PDL wait
  float eps = 0;
  const int32_t* positions = nullptr;  // [vectors / heads]; read before the PDL wait
  const float* inv_freq = nullptr;     // [rope_dim / 2]; read before the PDL wait
  int64_t rope_dim = 0;                // 0: no rotation
  float hadamard_scale = 0;            // 0: no Hadamard transform; else hadamard_rows' scale
  int64_t quant_cols = 0;              // 0: no quantisation rounding
  int64_t quant_block = 0;
  bool quant_e2m1 = false;
};
// Whether the one launch takes p: fewer vectors than the norm's warp-a-row kernel is for (at
// prefill sizes the separate kernels are faster), dim a multiple of 32 up to
// kNormRopeQuantMaxDim, quantisation blocks of at most 128 values.
constexpr int64_t kNormRopeQuantMaxDim = 1024;
bool norm_rope_quant_fits(const NormRopeQuantRowsParams& p);
void norm_rope_quant_rows(const NormRopeQuantRowsParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
