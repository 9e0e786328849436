// The lossless FP4 -> FP8 cast (loader/weights.h, cast_mxfp4_to_fp8) of a word of e2m1 codes in
// e2m1_mma_order's layout, as the staged FP8 GEMM does it in shared memory (fp8_mma_gemm.cu), on
// host and device alike so that a CPU test checks the device's formula.
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace dsv4::kernels {

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

// Word w of an e2m1_mma_order group (its inputs 8w .. 8w + 7) as the cast's e4m3 codes of those
// inputs, every e2m1 code c becoming sign(c) | byte (c & 7) of `magnitudes` (so -0, code 8, is
// 0x80, as the cast gives it). The word's nibble j (bits 4j .. 4j + 3) is input
//   j:     0  1  2  3  4  5  6  7
//   input: 6  4  2  0  7  5  3  1
// (e2m1_mma_order: inputs 2s and 2s + 1 at bits 12 - 4s and 28 - 4s). With the sign bits cleared,
// the low four nibbles and the high four are selectors that pick each one's magnitude from
// `magnitudes`; two byte permutes put the eight in input order. The signs are bits 4j + 3: bytes
// 0..3 of `word` hold those of nibbles 1, 3, 5, 7 (inputs 4, 0, 5, 1) at bit 7, bytes 0..3 of
// word << 4 those of nibbles 0, 2, 4, 6 (inputs 6, 2, 7, 3), and two byte permutes put them in
// input order too. 11 integer operations for the eight.
DSV4_HD E4m3x8 e2m1_word_to_e4m3(uint32_t word, E2m1Magnitudes magnitudes) {
  const uint32_t selectors = word & 0x77777777u;
  const uint32_t even = byte_perm(magnitudes.lo, magnitudes.hi, selectors);       // inputs 6, 4, 2, 0
  const uint32_t odd = byte_perm(magnitudes.lo, magnitudes.hi, selectors >> 16);  // inputs 7, 5, 3, 1
  const uint32_t low_signs = word << 4;
  E4m3x8 out;
  out.first = byte_perm(even, odd, 0x6273u) | (byte_perm(word, low_signs, 0x7531u) & 0x80808080u);
  out.second = byte_perm(even, odd, 0x4051u) | (byte_perm(word, low_signs, 0x6420u) & 0x80808080u);
  return out;
}

}  // namespace dsv4::kernels
