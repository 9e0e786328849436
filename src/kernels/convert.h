// Launchers for the format-conversion kernels: FP8 block-scaled weights to bf16, and the
// scalar roundings of core/numeric.h run on the device (so host and device agree by test).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::kernels {

// out[o, i] = bf16(e4m3(w[o, i]) * 2^(scale[o/128, i/128] - 127)).
// w: [rows, cols] e4m3 codes; scale: [ceil(rows/128), ceil(cols/128)] e8m0 codes; out: [rows, cols] bf16 bits.
void dequant_fp8_block_to_bf16(const uint8_t* w, const uint8_t* scale, uint16_t* out, int64_t rows,
                               int64_t cols, cudaStream_t stream);

// e4m3[i] = float_to_e4m3(x[i]); e2m1[i] = float_to_e2m1(x[i]); bf16[i] = float_to_bf16(x[i]).
void round_formats(const float* x, uint8_t* e4m3, uint8_t* e2m1, uint16_t* bf16, int64_t n,
                   cudaStream_t stream);

}  // namespace dsv4::kernels
