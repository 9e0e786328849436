// MXFP4 weights (e2m1_mma_order's layout, e2m1_layout.h) as fp16 MMA operands on the device: a
// slot's pair of codes times 2^shift, scaled by 2^-14 (exact), and the factor that takes it back.
// Shared by the FP8 GEMM's streamed kernel and the f16 WGMMA kernel's e2m1 consumers; and as bf16
// operands with the whole dequantisation folded in, for the chained order's kernel.
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

// Slot `slot` of a word as a bf16x2 operand: each value e2m1 x `scale` (bf16x2, the row's 2^shift
// times the block scale), exactly: e2m1_slot_bf16x2_bits' e2m1 x 2^-126 times 2^126 is the code's
// value (the subnormal 2^-127, code 1, included), and the second product is a power of two's.
__device__ __forceinline__ uint32_t e2m1_slot_to_bf16x2(uint32_t word, int slot, uint32_t scale) {
  constexpr uint32_t kTwoTo126 = 0x7E807E80u;  // bf16x2 2^126: exponent field 253
  const uint32_t bits = e2m1_slot_bf16x2_bits(word, slot);
  uint32_t value, h;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(value) : "r"(bits), "r"(kTwoTo126));
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(h) : "r"(value), "r"(scale));
  return h;
}

// The bf16x2 scale e2m1_slot_to_bf16x2 takes for a row's group of shift `shift` (0..6) in a block
// of weight scale `block_scale` (a power of two): 2^shift x block_scale in both halves, exact for
// every block scale from 2^-127 (the bf16 of a power of two is its fp32's top half).
__device__ __forceinline__ uint32_t e2m1_bf16x2_scale(uint32_t shift, float block_scale) {
  const uint32_t bits = __float_as_uint(block_scale * static_cast<float>(1u << shift)) >> 16;
  return bits * 0x00010001u;
}

// The factor a block scale of kE2M1 weights takes where e2m1_slot_to_f16x2 converted them (the
// streamed kernel, the f16 WGMMA kernel's e2m1 consumers): its 2^-14 taken back (exact: every scale is a
// power of two).
constexpr float kE2M1ScaleBack = 16384.0f;

// 2^shift (0..6) in both halves of an fp16x2 register: (15 + shift) << 10 in each, as one
// multiply-add, which runs on the FMA pipe, not on the integer pipe that the conversions keep busy.
__device__ __forceinline__ uint32_t pow2_f16x2(uint32_t shift) { return shift * 0x04000400u + 0x3C003C00u; }

}  // namespace dsv4::kernels
