// CpuOps linears: activation quantisation (FP8 1x128 blocks, MODEL.md §14) on an fp32 copy of x,
// then the row-independent BLAS product, then rounding to the output dtype.
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_io.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/linear_input.h"
#include "ops/param_checks.h"

namespace dsv4::cpu {

void CpuOps::linear(const LinearParams& p) {
  check_params(p);
  const int64_t M = p.x.dim(0), K = p.x.dim(1);
  if (p.w == nullptr || p.w->shape.size() != 2)
    throw UsageError("linear: the weight must be 2-D [out, in]");
  const int64_t N = p.w->shape[0];
  const float* w = weight_f32("linear", p.w, {N, K});
  expect_shape("linear", "y", p.y, {M, N});
  const std::vector<float> x = linear_input(pool_, p.x, p.act_quant);
  if (p.y.dtype() == DType::kF32) {
    gemm_xwt(pool_, x.data(), K, M, K, w, N, p.y.data<float>(), N);
    return;
  }
  std::vector<float> y(static_cast<size_t>(M * N));
  gemm_xwt(pool_, x.data(), K, M, K, w, N, y.data(), N);
  store_floats(p.y, 0, M * N, y.data());
}

void CpuOps::grouped_linear(const GroupedLinearParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), G = p.x.dim(1), K = p.x.dim(2), R = p.y.dim(2);
  const float* w = weight_f32("grouped_linear", p.w, {G * R, K});
  const std::vector<float> x = load_all(p.x);
  std::vector<float> y(static_cast<size_t>(T * G * R));
  for (int64_t g = 0; g < G; ++g)
    gemm_xwt(pool_, x.data() + g * K, G * K, T, K, w + g * R * K, R, y.data() + g * R, G * R);
  store_floats(p.y, 0, T * G * R, y.data());
}

}  // namespace dsv4::cpu
