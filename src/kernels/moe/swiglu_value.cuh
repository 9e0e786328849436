// One value of the experts' clamped SwiGLU in CpuOps' operation order (silu as v / (1 + exp(-v)),
// then the product), shared by kernels::swiglu and the activation quantisation that reads the
// experts' gate and up projections directly (kernels::act_quant_fp8 with a SwiGLU source).
#pragma once

namespace dsv4::kernels {

// The clamps (limit > 0), then silu(gate) * up; the row weight is the caller's.
__device__ __forceinline__ float swiglu_value(float gate, float up, float limit) {
  if (limit > 0) {
    gate = fminf(gate, limit);
    up = fminf(fmaxf(up, -limit), limit);
  }
  return __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate))), up);
}

}  // namespace dsv4::kernels
