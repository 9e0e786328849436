// The paged FP8 attention-cache layout of MODEL.md §8.1 ("fp8_ds_mla", 584 bytes per entry),
// shared by host and device code. A page holds `block_size` entries:
//   [ block_size x 576 B token data: 448 e4m3 (nope) | 64 bf16 (rope) ]
//   [ block_size x   8 B scales:     7 ue8m0 (one per 64 nope dims) | 1 zero pad byte ]
// An entry is addressed by its slot id = page * block_size + position in page.
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace dsv4 {

struct Fp8CacheLayout {
  static constexpr int kHeadDim = 512;
  static constexpr int kNopeDim = 448;
  static constexpr int kRopeDim = 64;
  static constexpr int kQuantBlock = 64;                       // nope dims per scale
  static constexpr int kScalesPerEntry = kNopeDim / kQuantBlock;  // 7
  static constexpr int kDataBytes = kNopeDim + 2 * kRopeDim;  // 576
  static constexpr int kScaleBytes = 8;
  static constexpr int kEntryBytes = kDataBytes + kScaleBytes;  // 584

  int block_size = 64;  // entries per page

  DSV4_HD int64_t page_bytes() const { return static_cast<int64_t>(block_size) * kEntryBytes; }
  DSV4_HD int64_t data_offset(int64_t slot) const {
    return (slot / block_size) * page_bytes() + (slot % block_size) * kDataBytes;
  }
  DSV4_HD int64_t scale_offset(int64_t slot) const {
    return (slot / block_size) * page_bytes() + static_cast<int64_t>(block_size) * kDataBytes +
           (slot % block_size) * kScaleBytes;
  }
};

}  // namespace dsv4
