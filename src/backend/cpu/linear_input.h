// The fp32 input of a CPU linear: x read as fp32 and, for FP8/FP4 linears, rounded the way the
// FP8 GEMM sees it (e4m3 per 1x128 block along K with a pow2 scale; a shorter last block is its
// own block). Shared by the plain linears and the experts.
#pragma once

#include <algorithm>
#include <vector>

#include "backend/cpu/float_io.h"
#include "backend/cpu/parallel_rows.h"
#include "backend/cpu/fast_quant.h"

namespace dsv4::cpu {

constexpr int64_t kActQuantBlock = 128;

// Rounds one fp32 row of K values in place as ActQuant says.
inline void quantize_activation_row(float* row, int64_t K, ActQuant q) {
  if (q == ActQuant::kNone) return;
  for (int64_t b = 0; b < K; b += kActQuantBlock)
    fake_quant_e4m3(row + b, std::min(kActQuantBlock, K - b));
}

inline std::vector<float> linear_input(ThreadPool& pool, ConstTensorView x, ActQuant q) {
  const int64_t M = x.dim(0), K = x.dim(1);
  std::vector<float> out(static_cast<size_t>(M * K));
  parallel_rows(pool, M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      load_floats(x, r * K, K, out.data() + r * K);
      quantize_activation_row(out.data() + r * K, K, q);
    }
  });
  return out;
}

}  // namespace dsv4::cpu
