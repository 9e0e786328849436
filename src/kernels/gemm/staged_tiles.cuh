// Pieces shared by the GEMMs that stage 128 x 128 tiles in shared memory (the staged kernels of
// kernels::fp8_mma_gemm, bf16_mma_gemm and grouped_bf16_fp8_gemm; their copies are cp_async.cuh's):
// a register's 32-bit words, the walk over K blocks that lets one register per output accumulate
// the four lanes of mma_lanes.cuh's summation order one after another, and the running sums in
// shared memory that the walk's passes fold into.
#pragma once

#include <cstdint>

#include "kernels/cp_async.cuh"

namespace dsv4::kernels {

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

// A warp's MI x NJ grid of 16x8 fp32 accumulator tiles (four values a lane each): set to zero.
template <int MI, int NJ>
__device__ __forceinline__ void zero_tiles(float (&acc)[MI][NJ][4]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
}

// Where a lane keeps the running sum of its tile element (i, j, c) in shared memory: its own word
// of every 32, so the lane alone reads and writes it (`sums` already offset by the lane).
template <int NJ>
__device__ __forceinline__ int sum_slot(int i, int j, int c) {
  return ((i * NJ + j) * 4 + c) * 32;
}

// Folds pass `pass`'s lane sums q into the running sums (this lane's own words of shared memory:
// no barrier): the first pass stores them, the later ones add them in pass order.
template <int MI, int NJ>
__device__ __forceinline__ void fold_pass(float* sums, const float (&q)[MI][NJ][4], int pass) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float& sum = sums[sum_slot<NJ>(i, j, c)];
        sum = pass == 0 ? q[i][j][c] : __fadd_rn(sum, q[i][j][c]);
      }
}

// Calls store(i, j, c, sum) for every element of the lane's running sums (sum a reference to its
// word, read only if the store reads it).
template <int MI, int NJ, typename Store>
__device__ __forceinline__ void for_each_sum(const float* sums, Store&& store) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) store(i, j, c, sums[sum_slot<NJ>(i, j, c)]);
}

}  // namespace dsv4::kernels
