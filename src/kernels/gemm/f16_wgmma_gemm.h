// fp8_mma_gemm's kF16Wgmma kernel (the staged kernel's bits on WGMMA over operands converted to
// fp16 beforehand, fed by TMA), called by fp8_mma_gemm; e4m3_to_f16_mma_order (fp8_mma_gemm.h)
// writes its operands. The same dense kernel on bf16 operands takes wo_a (grouped_bf16_fp8_gemm.h's
// numerics and bits) and the bf16 linears (bf16_mma_gemm.h's) at prefill sizes, and on e4m3 codes
// (FP8 WGMMAs) kWgmmaFp8's dense calls.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemm/fp8_mma_gemm.h"
#include "kernels/gemm/grouped_bf16_fp8_gemm.h"

namespace dsv4::kernels {

// Throws UsageError naming the first thing kF16Wgmma cannot take in p (see fp8_mma_gemm.h).
void check_f16_wgmma_gemm(const Fp8MmaGemmParams& p);

// y = the staged kernel's result for p, from p.x16 and p.w16; p must have passed
// check_f16_wgmma_gemm (fp8_mma_gemm's choice checks it before it calls this).
void f16_wgmma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream);

// Whether fp8_wgmma_dense_gemm takes p: dense, e4m3 weights with scales, no second output, x, w
// and x_scale 16-byte aligned, x_scale_ld a multiple of 4 and at least m (TMA's rules), k a
// multiple of 128.
bool fp8_wgmma_dense_takes(const Fp8MmaGemmParams& p);

// kWgmmaFp8's result for a dense call (fp8_mma_gemm.cu's fp8_wgmma_gemm_kernel's bits) from the
// dense f16-wgmma kernel's persistent, TMA-fed form on FP8 WGMMAs over p.x and p.w as they are;
// fp8_mma_gemm takes it for the calls it takes. UsageError where fp8_wgmma_dense_takes(p) is false.
void fp8_wgmma_dense_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream);

// Whether grouped_bf16_wgmma_gemm takes p's shape: r and k multiples of 128.
bool grouped_bf16_wgmma_takes(const GroupedBf16Fp8GemmParams& p);

// grouped_bf16_fp8_gemm(p) with its bits, on bf16 WGMMAs: x_mma is p.x ([tokens, groups * k])
// and w_mma p.w's values ([groups * r, k]) as bf16_to_mma_order and e4m3_to_bf16_mma_order write
// them (p.x and p.w are not read). Both 16-byte aligned.
void grouped_bf16_wgmma_gemm(const GroupedBf16Fp8GemmParams& p, const uint16_t* x_mma, const uint16_t* w_mma,
                             cudaStream_t stream);

// bf16_mma_gemm's y [m, n] (row stride ldy) = x [m, k] . w [n, k]^T with its bits, on bf16
// WGMMAs, from x and w as bf16_to_mma_order writes them (16-byte aligned, k a multiple of 128).
void bf16_wgmma_gemm(const uint16_t* x_mma, const uint16_t* w_mma, MutFloatPtr y, int64_t ldy, int64_t m, int64_t n,
                     int64_t k, cudaStream_t stream);

// The bf16 values of x [rows, k] (row stride ldx, even; 4-byte aligned), or of e4m3 codes [rows, k]
// (2-byte aligned), contiguous in e4m3_to_f16_mma_order's K order: position 32 t + 4 s + i of each
// 128-wide block goes to 16 s + 2 t + (i % 2) + 8 (i / 2). k a multiple of 128; out 16-byte aligned.
void bf16_to_mma_order(const uint16_t* x, int64_t ldx, uint16_t* out, int64_t rows, int64_t k, cudaStream_t stream);
void e4m3_to_bf16_mma_order(const uint8_t* codes, uint16_t* out, int64_t rows, int64_t k, cudaStream_t stream);

// kChainedBf16Wgmma's dense weight: e4m3 codes [rows, k] (2-byte aligned) times their 128 x 128
// block scales (scale[(row / 128) * scale_ld + K block], scale_ld >= k / 128) as exact bf16 values,
// in the same K order. out 16-byte aligned.
void e4m3_to_bf16_scaled_mma_order(const uint8_t* codes, const float* scale, int64_t scale_ld, uint16_t* out,
                                   int64_t rows, int64_t k, cudaStream_t stream);

}  // namespace dsv4::kernels
