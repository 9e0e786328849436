// A deterministic block-wide sum: a fixed shuffle tree inside each warp, then the warps' partial
// sums added in warp order, so a given block size always sums in the same order.
#pragma once

namespace dsv4::kernels {

// Sum of v over the block; every thread gets the result. `scratch` holds at least 32 floats of
// shared memory; blockDim.x must be a multiple of 32. Contains __syncthreads (all threads call).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += scratch[w];
  return total;
}

}  // namespace dsv4::kernels
