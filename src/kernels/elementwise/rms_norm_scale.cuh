// The RMS norm's scale of a row from its sum of squares, as every norm kernel computes it (1 / sqrt
// of the mean plus eps, the mean a division, as CpuOps does), so that the kernels that fuse a norm
// give rms_norm_rows' bits.
#pragma once

#include <cstdint>

namespace dsv4::kernels {

__device__ __forceinline__ float rms_norm_scale(float sum_of_squares, int64_t dim, float eps) {
  const float mean = sum_of_squares / static_cast<float>(dim);
  return 1.0f / sqrtf(mean + eps);
}

}  // namespace dsv4::kernels
