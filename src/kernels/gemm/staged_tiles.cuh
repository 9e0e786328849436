// Pieces shared by the GEMMs that stage 128 x 128 tiles in shared memory (kernels::fp8_mma_gemm's
// staged kernel, kernels::grouped_bf16_fp8_gemm's): cp.async copies with zero fill, a register's
// 32-bit words, and the walk over K blocks that lets one register per output accumulate the four
// lanes of mma_lanes.cuh's summation order one after another.
#pragma once

#include <cstdint>

namespace dsv4::kernels {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, or 16 zeros when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// 4 bytes global -> shared, or a zero when !valid.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The K block a CTA handles at step `step` of its walk 0, 4, 8, ..; 1, 5, ..; 2, ..; 3, ..: pass
// p of the walk accumulates lane q_p of the summation order, and the passes' sums are added in
// order at their ends, which is ((q_0 + q_1) + q_2) + q_3.
__device__ __forceinline__ int staged_block_at(int step, int kblocks) {
  for (int residue = 0;; ++residue) {
    const int count = (kblocks - residue + 3) / 4;  // blocks b < kblocks with b % 4 == residue
    if (step < count) return residue + 4 * step;
    step -= count;
  }
}

}  // namespace dsv4::kernels
