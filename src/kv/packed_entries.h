// The packed cache entries of `--kv-cache-dtype fp8` (docs/MODEL.md §8.1, §8.3), one codec for
// host and device code: an attention entry (window row or compressed entry) in the 584-byte FP8
// layout of kv/fp8_cache_layout.h, an indexer key in the 68-byte MXFP4 layout below. The forward's
// QAT has already rounded every cached value onto these grids (e4m3 with a pow2 scale per 64 nope
// dims and bf16 rope dims; e2m1 with a pow2 scale per 32 key dims), so encode then decode gives
// the row back bit for bit: the packed caches change no number, only the bytes.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/quant.h"
#include "kv/fp8_cache_layout.h"

namespace dsv4 {

// An indexer key of 128 dims as vLLM's MXFP4 indexer cache keeps it (`dsa_indexer_uses_fp4`):
// 64 bytes of e2m1 pairs (element 2i in the low nibble) and 4 ue8m0 scales, one per 32 dims. A
// page of `block_size` keys: [block_size x 64 B codes][block_size x 4 B scales]. A key is
// addressed by its slot id = page * block_size + position in page.
struct Mxfp4KeyLayout {
  static constexpr int kDim = 128;
  static constexpr int kQuantBlock = 32;
  static constexpr int kCodeBytes = kDim / 2;                 // 64
  static constexpr int kScaleBytes = kDim / kQuantBlock;      // 4
  static constexpr int kEntryBytes = kCodeBytes + kScaleBytes;  // 68

  int block_size = 64;  // keys per page

  DSV4_HD int64_t page_bytes() const { return static_cast<int64_t>(block_size) * kEntryBytes; }
  DSV4_HD int64_t code_offset(int64_t slot) const {
    return (slot / block_size) * page_bytes() + (slot % block_size) * kCodeBytes;
  }
  DSV4_HD int64_t scale_offset(int64_t slot) const {
    return (slot / block_size) * page_bytes() + static_cast<int64_t>(block_size) * kCodeBytes +
           (slot % block_size) * kScaleBytes;
  }
};

// Stores row[0, 512) (nope dims, then rope dims exactly representable in bf16) as entry `slot`
// of the pages at `pool`.
DSV4_HD void encode_fp8_entry(const float* row, const Fp8CacheLayout& layout, int64_t slot, uint8_t* pool) {
  using L = Fp8CacheLayout;
  uint8_t* data = pool + layout.data_offset(slot);
  uint8_t* scales = pool + layout.scale_offset(slot);
  for (int b = 0; b < L::kScalesPerEntry; ++b)
    scales[b] = quantize_block_e4m3(row + b * L::kQuantBlock, L::kQuantBlock, data + b * L::kQuantBlock);
  scales[L::kScalesPerEntry] = 0;
  for (int i = 0; i < L::kRopeDim; ++i) {
    const uint16_t bits = float_to_bf16(row[L::kNopeDim + i]);
    data[L::kNopeDim + 2 * i] = static_cast<uint8_t>(bits & 0xff);
    data[L::kNopeDim + 2 * i + 1] = static_cast<uint8_t>(bits >> 8);
  }
}

// Entry `slot` of the pages at `pool` as 512 floats; `e4m3_value` maps a code to its value (a
// host caller may pass a table of e4m3_to_float's values).
template <typename E4m3Value>
DSV4_HD void decode_fp8_entry(const uint8_t* pool, const Fp8CacheLayout& layout, int64_t slot, float* row,
                              E4m3Value e4m3_value) {
  using L = Fp8CacheLayout;
  const uint8_t* data = pool + layout.data_offset(slot);
  const uint8_t* scales = pool + layout.scale_offset(slot);
  for (int b = 0; b < L::kScalesPerEntry; ++b) {
    const float scale = e8m0_to_float(scales[b]);
    for (int i = b * L::kQuantBlock; i < (b + 1) * L::kQuantBlock; ++i) row[i] = e4m3_value(data[i]) * scale;
  }
  for (int i = 0; i < L::kRopeDim; ++i) {
    const auto bits = static_cast<uint16_t>(data[L::kNopeDim + 2 * i] | (data[L::kNopeDim + 2 * i + 1] << 8));
    row[L::kNopeDim + i] = bf16_to_float(bits);
  }
}

DSV4_HD void decode_fp8_entry(const uint8_t* pool, const Fp8CacheLayout& layout, int64_t slot, float* row) {
  decode_fp8_entry(pool, layout, slot, row, [](uint8_t code) { return e4m3_to_float(code); });
}

// Stores key[0, 128) as key `slot` of the pages at `pool`.
DSV4_HD void encode_mxfp4_key(const float* key, const Mxfp4KeyLayout& layout, int64_t slot, uint8_t* pool) {
  using L = Mxfp4KeyLayout;
  uint8_t* codes = pool + layout.code_offset(slot);
  uint8_t* scales = pool + layout.scale_offset(slot);
  for (int b = 0; b < L::kScaleBytes; ++b) {
    uint8_t block[L::kQuantBlock];
    scales[b] = quantize_block_e2m1(key + b * L::kQuantBlock, L::kQuantBlock, block);
    for (int i = 0; i < L::kQuantBlock; i += 2) codes[(b * L::kQuantBlock + i) / 2] = pack_e2m1x2(block[i], block[i + 1]);
  }
}

// Key `slot` of the pages at `pool` as 128 floats.
DSV4_HD void decode_mxfp4_key(const uint8_t* pool, const Mxfp4KeyLayout& layout, int64_t slot, float* key) {
  using L = Mxfp4KeyLayout;
  const uint8_t* codes = pool + layout.code_offset(slot);
  const uint8_t* scales = pool + layout.scale_offset(slot);
  for (int b = 0; b < L::kScaleBytes; ++b) {
    const float scale = e8m0_to_float(scales[b]);
    for (int i = b * L::kQuantBlock; i < (b + 1) * L::kQuantBlock; i += 2) {
      key[i] = e2m1_to_float(e2m1x2_low(codes[i / 2])) * scale;
      key[i + 1] = e2m1_to_float(e2m1x2_high(codes[i / 2])) * scale;
    }
  }
}

// ---- Cache tensors ------------------------------------------------------------------------------
// A cache's dtype is that of its rows (kBF16, or kF32 in exact math) or kF8E4M3, the packed
// entries above: then its tensors are kU8 with one packed entry per row (a row of pages keeps
// the page layout, entries' data first), so a [pages, page_rows, bytes] pool or a [W, bytes]
// window ring keeps the shape of its unpacked twin.

enum class PackedEntry { kNone, kFp8Attention, kMxfp4Key };

// The packed entry a cache tensor's rows hold: kNone for float rows; kU8 rows of 584 or 68 bytes
// are attention entries or indexer keys.
inline PackedEntry packed_entry(DType stored, int64_t stored_width) {
  if (stored != DType::kU8) return PackedEntry::kNone;
  if (stored_width == Fp8CacheLayout::kEntryBytes) return PackedEntry::kFp8Attention;
  if (stored_width == Mxfp4KeyLayout::kEntryBytes) return PackedEntry::kMxfp4Key;
  return PackedEntry::kNone;
}

// The values a row of stored width `stored_width` holds (the width itself for float rows).
inline int64_t unpacked_width(DType stored, int64_t stored_width) {
  switch (packed_entry(stored, stored_width)) {
    case PackedEntry::kFp8Attention: return Fp8CacheLayout::kHeadDim;
    case PackedEntry::kMxfp4Key: return Mxfp4KeyLayout::kDim;
    case PackedEntry::kNone: break;
  }
  return stored_width;
}

// Whether a cache tensor's rows (`stored` dtype, `stored_width` wide) hold `width` values each:
// bf16 or f32 rows of that width, or packed entries that unpack to it.
inline bool cache_rows_hold(DType stored, int64_t stored_width, int64_t width) {
  const bool packs = packed_entry(stored, stored_width) != PackedEntry::kNone;
  return (packs || stored == DType::kBF16 || stored == DType::kF32) && unpacked_width(stored, stored_width) == width;
}

// The dtype of a cache of `cache_dtype`'s tensors.
inline DType cache_storage_dtype(DType cache_dtype) { return cache_dtype == DType::kF8E4M3 ? DType::kU8 : cache_dtype; }

// The stored width of a row of `width` values (512 for attention entries, 128 for indexer keys
// when packed) in a cache of `cache_dtype`; UsageError when that cache cannot pack such a row.
inline int64_t cache_stored_width(DType cache_dtype, int64_t width) {
  if (cache_dtype != DType::kF8E4M3) return width;
  if (width == Fp8CacheLayout::kHeadDim) return Fp8CacheLayout::kEntryBytes;
  if (width == Mxfp4KeyLayout::kDim) return Mxfp4KeyLayout::kEntryBytes;
  throw UsageError("fp8 caches pack rows of " + std::to_string(Fp8CacheLayout::kHeadDim) + " (attention) or " +
                   std::to_string(Mxfp4KeyLayout::kDim) + " (indexer keys) values, not " + std::to_string(width));
}

}  // namespace dsv4
