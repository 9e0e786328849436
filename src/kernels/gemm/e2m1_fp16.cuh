// MXFP4 weights (e2m1_mma_order's layout, e2m1_layout.h) as fp16 MMA operands on the device: a
// slot's pair of codes times 2^shift, scaled by 2^-14 (exact), and the factor that takes it back.
// Shared by the FP8 GEMM's streamed kernel and the f16 WGMMA kernel's e2m1 consumers.
#pragma once

#include <cstdint>

#include "kernels/gemm/e2m1_layout.h"

namespace dsv4::kernels {

// Slot `slot` (a constant once the caller's loop unrolls) of a word of e2m1_mma_order's codes as
// an fp16x2 operand, each value e2m1 x 2^-14 x `scale` (fp16x2 2^shift, 2^0..2^6), exactly.
__device__ __forceinline__ uint32_t e2m1_slot_to_f16x2(uint32_t word, int slot, uint32_t scale) {
  const uint32_t bits = e2m1_slot_f16x2_bits(word, slot);
  uint32_t h;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(h) : "r"(bits), "r"(scale));
  return h;
}

// The factor a block scale of kE2M1 weights takes where e2m1_slot_to_f16x2 converted them (the
// streamed kernel, the f16 WGMMA kernel's e2m1 consumers): its 2^-14 taken back (exact: every scale is a
// power of two).
constexpr float kE2M1ScaleBack = 16384.0f;

// 2^shift (0..6) in both halves of an fp16x2 register: (15 + shift) << 10 in each, as one
// multiply-add, which runs on the FMA pipe, not on the integer pipe that the conversions keep busy.
__device__ __forceinline__ uint32_t pow2_f16x2(uint32_t shift) { return shift * 0x04000400u + 0x3C003C00u; }

}  // namespace dsv4::kernels
