// A plain tiled GEMM with fp32 accumulation, y = x @ w^T, for every linear the FP8 tensor-core
// path does not take: fp32/bf16 weights, exact-math FP8 linears (weights dequantised on the fly,
// exactly as the CPU dequantises them), shapes cuBLASLt's block-scaled FP8 cannot run. Each
// output is one fp32 FMA chain over k ascending, so a row's result depends only on that row
// (batch composition never changes a bit) and runs repeat bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

enum class GemmWeight : uint8_t {
  kF32,
  kBF16,
  kE4M3,  // e4m3 codes, each times its 128x128 block's fp32 scale
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
};

void simple_gemm(const SimpleGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
