// kv/packed_entries.h's cache entries on the device: a block packs a row into a 584-byte FP8
// attention entry or a 68-byte MXFP4 indexer key with the bytes encode_fp8_entry and
// encode_mxfp4_key give (each quantisation block's amax by warp shuffles, then core/numeric.h's
// scale and rounding per value), and the attention and indexer kernels turn packed codes back
// into the bf16 values they hold (exact: an e4m3 or e2m1 value times a power of two has at most
// 4 significant bits, and the forward's QAT put every cached value on that grid).
#pragma once

#include <cstdint>

#include "core/numeric.h"
#include "kernels/float_ptr.h"
#include "kernels/gemm/mma_lanes.cuh"
#include "kv/packed_entries.h"

namespace dsv4::kernels {

// Threads a block needs for pack_entry_in_block: a warp per quantisation block of an attention
// entry (7) and one for its rope dims.
constexpr int kPackEntryThreads = 256;

// Packs values src[src_begin, src_begin + width) (width 512 for kFp8Attention, 128 for
// kMxfp4Key) into entry `slot` of the pages at `pool` (`page_rows` entries a page). Called by
// every thread of a block of kPackEntryThreads.
__device__ inline void pack_entry_in_block(PackedEntry kind, FloatPtr src, int64_t src_begin, uint8_t* pool,
                                           int page_rows, int64_t slot) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const auto warp_amax = [](float a) {
    for (int off = 16; off > 0; off /= 2) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
    return a;
  };
  if (kind == PackedEntry::kFp8Attention) {
    using L = Fp8CacheLayout;
    const L layout{page_rows};
    uint8_t* data = pool + layout.data_offset(slot);
    uint8_t* scales = pool + layout.scale_offset(slot);
    if (warp < L::kScalesPerEntry) {  // lane holds values 2 lane, 2 lane + 1 of nope block `warp`
      const int at = warp * L::kQuantBlock + 2 * lane;
      const float v0 = load_float(src, src_begin + at), v1 = load_float(src, src_begin + at + 1);
      const int e = pow2_scale_exponent(warp_amax(fmaxf(fabsf(v0), fabsf(v1))), kFp8AmaxFloor, kE4M3Max);
      data[at] = float_to_e4m3(ldexpf(v0, -e));
      data[at + 1] = float_to_e4m3(ldexpf(v1, -e));
      if (lane == 0) scales[warp] = e8m0_from_exponent(e);
    } else if (warp == L::kScalesPerEntry) {  // the rope dims as bf16, low byte first; the pad byte
      for (int i = 2 * lane; i < 2 * lane + 2; ++i) {
        const uint16_t bits = float_to_bf16(load_float(src, src_begin + L::kNopeDim + i));
        data[L::kNopeDim + 2 * i] = static_cast<uint8_t>(bits & 0xff);
        data[L::kNopeDim + 2 * i + 1] = static_cast<uint8_t>(bits >> 8);
      }
      if (lane == 0) scales[L::kScalesPerEntry] = 0;
    }
  } else if (kind == PackedEntry::kMxfp4Key) {
    using L = Mxfp4KeyLayout;
    if (warp >= L::kScaleBytes) return;
    const L layout{page_rows};
    const int at = warp * L::kQuantBlock + lane;  // lane holds value `at` of quantisation block `warp`
    const float v = load_float(src, src_begin + at);
    const int e = pow2_scale_exponent(warp_amax(fabsf(v)), kFp4AmaxFloor, kE2M1Max);
    const auto code = static_cast<uint32_t>(float_to_e2m1(ldexpf(v, -e)));
    const uint32_t odd = __shfl_down_sync(0xffffffffu, code, 1);
    if (lane % 2 == 0)
      pool[layout.code_offset(slot) + at / 2] = pack_e2m1x2(static_cast<uint8_t>(code), static_cast<uint8_t>(odd));
    if (lane == 0) pool[layout.scale_offset(slot) + warp] = e8m0_from_exponent(e);
  }
}

// e8m0_to_float's value without its ldexpf: 2^(code - 127), code 0 the subnormal 2^-127, 0xFF NaN.
__device__ __forceinline__ float e8m0_value(uint8_t code) {
  if (code == kE8M0Nan) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(code == 0 ? 0x00400000u : static_cast<uint32_t>(code) << 23);
}

// Eight e4m3 codes (`codes`, low byte first) times `scale` (a power of two) as eight bf16 values
// in a 16-byte word, exactly decode_fp8_entry's values.
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(uint2 codes, float scale) {
  const auto scaled = [scale](uint32_t two_codes) {
    const uint32_t h = e4m3x2_to_f16x2(two_codes);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
    return *reinterpret_cast<const uint32_t*>(&b);
  };
  return make_uint4(scaled(codes.x & 0xffffu), scaled(codes.x >> 16), scaled(codes.y & 0xffffu), scaled(codes.y >> 16));
}

// e2m1_to_float's value from the code's bits: magnitudes 2..7 are 2^((m >> 1) - 1) (1 + (m & 1) / 2),
// 1 is 0.5, 0 is 0; bit 3 the sign.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t m = code & 7u;
  const uint32_t magnitude = m < 2 ? m * 0x3F000000u : (126u + (m >> 1)) << 23 | (m & 1u) << 22;
  return __uint_as_float(magnitude | (code & 8u) << 28);
}

// Eight e2m1 codes (`codes`: four bytes, element 2i in byte i's low nibble) times `scale` as
// eight bf16 values in a 16-byte word, exactly decode_mxfp4_key's values (every product is exact
// in bf16, so the hardware's rounding keeps it).
__device__ __forceinline__ uint4 e2m1x8_to_bf16x8(uint32_t codes, float scale) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(e2m1_value(codes >> (8 * i)) * scale,
                                                   e2m1_value(codes >> (8 * i + 4)) * scale);
    words[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

}  // namespace dsv4::kernels
