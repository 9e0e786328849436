// fp8_mma_gemm's kF16Wgmma kernel (the staged kernel's bits on WGMMA over operands converted to
// fp16 beforehand, fed by TMA), called by fp8_mma_gemm; e4m3_to_f16_mma_order (fp8_mma_gemm.h)
// writes its operands.
#pragma once

#include <cuda_runtime.h>

#include "kernels/gemm/fp8_mma_gemm.h"

namespace dsv4::kernels {

// Throws UsageError naming the first thing kF16Wgmma cannot take in p (see fp8_mma_gemm.h).
void check_f16_wgmma_gemm(const Fp8MmaGemmParams& p);

// y = the staged kernel's result for p, from p.x16 and p.w16; p must have passed
// check_f16_wgmma_gemm (fp8_mma_gemm's choice checks it before it calls this).
void f16_wgmma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
