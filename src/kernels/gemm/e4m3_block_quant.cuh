// The quantisation of one 1x128 activation block into e4m3 codes and a power-of-two scale (MODEL.md
// §14), for every kernel that quantises activations: act_quant_fp8 and the GEMMs that quantise x
// themselves (fp8_mma_gemm.h's x_bf16). A block's amax is exact in any order and each code a
// function of its value and the block's exponent alone, so however a kernel splits a block over
// its threads the codes and scales are the same bits.
#pragma once

#include <cstdint>

#include "core/numeric.h"
#include "kernels/e4m3_cast.cuh"

namespace dsv4::kernels {

// The exponent e of a block whose largest magnitude is amax: its scale is 2^e.
__device__ __forceinline__ int e4m3_block_exponent(float amax) {
  return pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
}

// The codes of v[0..N-1] / 2^e, four a word, low byte first: with 2^-e a normal float (every block
// whose amax is finite) a multiply by it, which is ldexpf(v, -e) exactly; otherwise ldexpf itself.
template <int N>
__device__ __forceinline__ void e4m3_block_codes(const float (&v)[N], int e, uint32_t (&packed)[N / 4]) {
  static_assert(N % 4 == 0, "whole words of codes");
#pragma unroll
  for (int i = 0; i < N / 4; ++i) packed[i] = 0;
  if (e > -127 && e < 127) {
    const float down = pow2(-e);
#pragma unroll
    for (int i = 0; i < N; i += 2) packed[i / 4] |= float2_to_e4m3x2(v[i] * down, v[i + 1] * down) << (8 * (i % 4));
  } else {
#pragma unroll
    for (int i = 0; i < N; i += 2)
      packed[i / 4] |= float2_to_e4m3x2(ldexpf(v[i], -e), ldexpf(v[i + 1], -e)) << (8 * (i % 4));
  }
}

// The values of bf16 pairs (low half first) as floats.
template <int W>
__device__ __forceinline__ void bf16_pairs_to_floats(const uint32_t (&words)[W], float (&v)[2 * W]) {
#pragma unroll
  for (int i = 0; i < W; ++i) {
    v[2 * i] = bf16_to_float(words[i] & 0xffff);
    v[2 * i + 1] = bf16_to_float(words[i] >> 16);
  }
}

}  // namespace dsv4::kernels
