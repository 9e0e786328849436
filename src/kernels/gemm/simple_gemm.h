// The fp32-accumulating GEMM y = x @ w^T for every linear the FP8 tensor-core path does not take:
// fp32/bf16 weights, exact-math FP8 linears (weights dequantised on the fly, exactly as the CPU
// dequantises them), shapes cuBLASLt's block-scaled FP8 cannot run. Two kernels (a tiled one for
// many rows, a GEMV for decode-sized m) follow one summation order, so a row's result depends only
// on that row (batch composition and the kernel chosen never change a bit) and runs repeat bit for
// bit.
//
// The canonical order, for one output y[r, j] = sum_k x[r, k] * w[j, k]:
//   K is cut into chunks of kSimpleGemmChunk = 64 columns, chunk c = [64c, min(64c + 64, K));
//   partial_c = 0.0f; for k ascending in chunk c: partial_c = fmaf(x[r, k], w[j, k], partial_c);
//   total = 0.0f;     for c ascending:            total = __fadd_rn(total, partial_c);
//   y[r, j] = total, rounded to y's type.
// x[r, k] is the fp32 value of x (bf16 widened exactly); w[j, k] is the fp32 weight (bf16 widened
// exactly; e4m3 decoded exactly, then __fmul_rn by its pow2 block scale). Every step is one
// IEEE-754 binary32 operation rounded to nearest even, with subnormals kept, so a host reference
// with std::fma and plain float + and * reproduces it bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

constexpr int64_t kSimpleGemmChunk = 64;

enum class GemmWeight : uint8_t {
  kF32,
  kBF16,
  kE4M3,  // e4m3 codes, each times its 128x128 block's fp32 scale
};

// Which kernel simple_gemm runs. Both give identical bits; kAuto picks by shape (see simple_gemm),
// the others are for tests and benchmarks.
enum class SimpleGemmKernel : uint8_t {
  kAuto,
  kTiled,  // 64x64 output tiles; good when the tiles fill the GPU
  kGemv,   // K spread over threads, rows of x in blocks of 16; good for decode-sized m
};

struct SimpleGemmParams {
  FloatPtr x;                    // [m, k] rows with stride ldx elements
  int64_t ldx = 0;
  const void* w = nullptr;       // [n, k] dense, element type w_type
  GemmWeight w_type = GemmWeight::kF32;
  const float* w_scale = nullptr;  // kE4M3: element (row, c) has scale w_scale[(row/128) * w_scale_ld + c/128]
  int64_t w_scale_ld = 0;          // (cuda::fp8_weight_scales_for_cublaslt's layout)
  MutFloatPtr y;                 // [m, n] rows with stride ldy elements, rounded to y's type
  int64_t ldy = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  // Grouped products (grid z): group g reads x + g * x_group_stride, weight rows g*n .. g*n + n
  // (with their scales), and writes y + g * y_group_stride.
  int64_t groups = 1;
  int64_t x_group_stride = 0;
  int64_t y_group_stride = 0;
  SimpleGemmKernel kernel = SimpleGemmKernel::kAuto;
};

// kAuto runs the GEMV when m <= 16, or when m * n * groups * k <= 2^28 (measured, see
// simple_gemm.cu); otherwise the tiled kernel. The GEMV keeps every chunk's partial of a
// block in 48 KiB of shared memory, (x rows per block: 1, 4 or 16) * (chunks + 1) floats at least,
// so it takes up to 767 chunks (K = 49088) at m > 4; beyond that kGemv throws UsageError and kAuto
// tiles.
void simple_gemm(const SimpleGemmParams& p, cudaStream_t stream);

// The kernel simple_gemm runs for p (kTiled or kGemv; p.kernel resolved as above, same throws).
SimpleGemmKernel simple_gemm_choice(const SimpleGemmParams& p);

}  // namespace dsv4::kernels
