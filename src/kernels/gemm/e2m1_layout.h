// The layout in which the FP8 GEMM reads MXFP4 weights (e2m1_device_layout, fp8_mma_gemm.h): where
// a row's K block sits, how its codes are ordered within 16 bytes, and that order's two
// conversions: a slot's pair of codes to an fp16x2 MMA operand (the streamed kernel) and a word's
// eight codes to the lossless FP4 -> FP8 cast's e4m3 codes (loader/weights.h, cast_mxfp4_to_fp8;
// the staged kernel, in shared memory). Host and device alike, so that CPU tests check the
// device's formulas.
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace dsv4::kernels {

// Where a row's bytes of a K block sit. The kernels read a K block (128 inputs) of 16 weight rows
// at a time (the streamed kernel's warp: one MMA's rows; the prefill kernels' producers: 128 rows,
// 8 such tiles), so the device keeps each such tile's bytes together: [ceil(n / 16)][k / 128]
// tiles, each 16 rows x 64 bytes of codes (a row's 16-byte groups in e2m1_mma_order's order) and,
// apart, 16 rows x 4 shift bytes. In the checkpoint's row-major order a warp's K block was 16
// pieces of 64 bytes 2 KB apart (at k = 4096); here it is one kilobyte, and decode steps of batch
// 1-64 ran 2.4-3.5% faster for it, prefills ~0.9% (docs/PERF.md, session 35). Rows past n (up to
// the next multiple of 16) are padding that no kernel uses.
inline constexpr int64_t kE2m1TileRows = 16;
inline constexpr int64_t kE2m1RowCodeBytes = 64;  // a row's codes of one K block
inline constexpr int64_t kE2m1BlockCodeStride = kE2m1TileRows * kE2m1RowCodeBytes;  // from K block b to b + 1
inline constexpr int64_t kE2m1BlockShiftStride = kE2m1TileRows * 4;

// Rows the device layout holds for a weight of n rows.
DSV4_HD int64_t e2m1_layout_rows(int64_t n) { return (n + kE2m1TileRows - 1) / kE2m1TileRows * kE2m1TileRows; }

// Row `row`'s codes (shifts) of K block 0 in a weight of k inputs; K block b adds b strides.
DSV4_HD int64_t e2m1_row_codes_at(int64_t row, int64_t k) {
  return row / kE2m1TileRows * (k / 128) * kE2m1BlockCodeStride + row % kE2m1TileRows * kE2m1RowCodeBytes;
}
DSV4_HD int64_t e2m1_row_shifts_at(int64_t row, int64_t k) {
  return row / kE2m1TileRows * (k / 128) * kE2m1BlockShiftStride + row % kE2m1TileRows * 4;
}

// A 32-bit word of the layout holds eight inputs, a pair per slot s = 0..3: input 2s in the lower
// 16-bit half, input 2s + 1 at the same bits of the upper half (+ 16). An e2m1 code is a sign and
// three magnitude bits (two exponent bits over one mantissa bit); slot s keeps its magnitude at
// bits magnitude .. magnitude + 2 and its sign at bit `sign` of the lower half:
//   slot:       0   1   2   3
//   magnitude:  8   0  11   3
//   sign:      14   6   7  15
// The streamed kernel wants each code as an fp16 with the sign at bit 15 and the magnitude at bits
// 9..11 (below). No four shifts of that pattern tile 32 bits, but slots 0 and 1 hold it moved down
// 1 and 9 bits (a shift and a mask each) and slots 2 and 3 split it (two of each): 6 masks a word,
// on the integer pipe that bounds the streamed kernel, where a contiguous nibble per input took 8
// and a shift. The magnitudes stay where one shift makes them nibbles, as the staged kernel's
// byte-permute lookup needs. e2m1_mma_order lays the codes out by kE2m1Slots; the host tests check
// the conversions below against it.
struct E2m1SlotBits {
  int magnitude = 0;
  int sign = 0;
};
inline constexpr E2m1SlotBits kE2m1Slots[4] = {{8, 14}, {0, 6}, {11, 7}, {3, 15}};

// Slot `slot`'s pair (a constant once the caller unrolls) as fp16x2 bits whose values are the
// e2m1 values x 2^-14, exactly: the sign at bit 15 and the magnitude at bits 9..11 (the two low
// exponent bits and the top mantissa bit) read as an fp16 give e2m1 x 2^-14, codes 0 and 1 (zero
// and 0.5) coming out as fp16 zero and the subnormal 2^-15. Both halves at once.
DSV4_HD uint32_t e2m1_slot_f16x2_bits(uint32_t word, int slot) {
  switch (slot) {
    case 0: return (word << 1) & 0x8E008E00u;
    case 1: return (word << 9) & 0x8E008E00u;
    case 2: return ((word >> 2) & 0x0E000E00u) | ((word << 8) & 0x80008000u);
    default: return ((word << 6) & 0x0E000E00u) | (word & 0x80008000u);
  }
}

// The same pair as bf16x2 bits whose values are the e2m1 values x 2^-126, exactly: the sign at bit
// 15 and the magnitude at bits 6..8 (bf16's two low exponent bits and its top mantissa bit), codes
// 0 and 1 coming out as zero and the subnormal 2^-127. For the chained order's kernels, whose x
// operand (bf16, its scale folded in) makes the weight's bf16 too. A shift and a mask for each of
// the two fields.
DSV4_HD uint32_t e2m1_slot_bf16x2_bits(uint32_t word, int slot) {
  constexpr uint32_t kMagnitude = 0x01C001C0u, kSign = 0x80008000u;
  switch (slot) {
    case 0: return ((word >> 2) & kMagnitude) | ((word << 1) & kSign);
    case 1: return ((word << 6) & kMagnitude) | ((word << 9) & kSign);
    case 2: return ((word >> 5) & kMagnitude) | ((word << 8) & kSign);
    default: return ((word << 3) & kMagnitude) | (word & kSign);
  }
}

// PTX's prmt.b32 (generic mode) on host and device: byte n of the result is byte (selector >> 4n)
// & 7 of the eight bytes lo (0..3), hi (4..7), or, where bit 4n + 3 of the selector is set, that
// byte's top bit copied into all eight. The selector's upper 16 bits are ignored.
DSV4_HD uint32_t byte_perm(uint32_t lo, uint32_t hi, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(out) : "r"(lo), "r"(hi), "r"(selector));
  return out;
#else
  const uint64_t bytes = static_cast<uint64_t>(hi) << 32 | lo;
  uint32_t out = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t nibble = selector >> (4 * n);
    uint32_t byte = static_cast<uint32_t>(bytes >> (8 * (nibble & 7u))) & 0xFFu;
    if ((nibble & 8u) != 0) byte = (byte & 0x80u) != 0 ? 0xFFu : 0u;
    out |= byte << (8 * n);
  }
  return out;
#endif
}

// The e4m3 codes of the eight e2m1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} times 2^shift (shift
// 0..6, so at most 384 <= 448): byte m of lo (m = 0..3) or of hi (m = 4..7) holds magnitude m's.
// Every nonzero one is a normal e4m3, 2^e x (1 + f / 8) with exponent field e + 7 at bits 3..6 and
// f at bits 0..2: 0.5 x 2^shift has field shift + 6 and f = 0; magnitude m >= 2 is e2m1's
// (m >> 1) - 1 exponent and (m & 1) / 2 fraction, so field (m >> 1) + 6 + shift and f = 4 (m & 1),
// which is 4m + 8 (6 + shift) as a byte. The bytes stay below 0x80, so no sum carries into the
// next.
struct E2m1Magnitudes {
  uint32_t lo = 0, hi = 0;
};

DSV4_HD E2m1Magnitudes e2m1_magnitudes_as_e4m3(uint32_t shift) {
  return {0x3C383000u + shift * 0x08080800u, 0x4C484440u + shift * 0x08080808u};
}

// Eight e4m3 codes in input order: `first` holds inputs 0..3 (input i in byte i), `second` 4..7.
struct E4m3x8 {
  uint32_t first = 0, second = 0;
};

// A word of the layout (inputs 0..7) as the cast's e4m3 codes of those inputs, every e2m1 code c
// becoming sign(c) | byte (c & 7) of `magnitudes` (so -0, code 8, is 0x80, as the cast gives it).
// The magnitudes of slots 1 and 0 sit at nibbles 0 and 2 of each half, those of slots 3 and 2 one
// bit below nibbles 1 and 3, so word & 0x07070707 with (word << 1) & 0x70707070 are selectors, one
// per nibble j, for inputs
//   j:     0  1  2  3  4  5  6  7
//   input: 2  6  0  4  3  7  1  5
// that pick each magnitude from `magnitudes`; two byte permutes put the eight in input order. The
// signs: bytes 0..3 of `word` hold those of inputs 4, 6, 5, 7 at bit 7 (slots 2 and 3), bytes 0..3
// of word << 1 those of 2, 0, 3, 1 (slots 1 and 0), and two byte permutes put them in input order
// too. 12 integer operations for the eight.
DSV4_HD E4m3x8 e2m1_word_to_e4m3(uint32_t word, E2m1Magnitudes magnitudes) {
  const uint32_t up = word << 1;
  const uint32_t selectors = (word & 0x07070707u) | (up & 0x70707070u);
  const uint32_t even = byte_perm(magnitudes.lo, magnitudes.hi, selectors);       // inputs 2, 6, 0, 4
  const uint32_t odd = byte_perm(magnitudes.lo, magnitudes.hi, selectors >> 16);  // inputs 3, 7, 1, 5
  E4m3x8 out;
  out.first = byte_perm(even, odd, 0x4062u) | (byte_perm(word, up, 0x6475u) & 0x80808080u);
  out.second = byte_perm(even, odd, 0x5173u) | (byte_perm(word, up, 0x3120u) & 0x80808080u);
  return out;
}

}  // namespace dsv4::kernels
