// cuBLASLt FP8 block-scaled GEMM (see fp8_gemm.h for the layouts).
#include "backend/cuda/fp8_gemm.h"

#include <optional>
#include <string>

#include "backend/cuda/cublas_check.h"
#include "backend/cuda/stream_buffer.h"
#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cuda_check.h"

namespace dsv4::cuda {
namespace {

// The workspace the algorithm search may assume; each algorithm reports what it needs of it.
constexpr size_t kMaxWorkspaceBytes = size_t{32} << 20;

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}

}  // namespace

int64_t fp8_gemm_padded_m(int64_t m) {
  const int64_t four = (m + 3) / 4 * 4;
  return four < 16 ? 16 : four;
}

std::vector<float> fp8_weight_scales_for_cublaslt(const uint8_t* e8m0, int64_t n, int64_t k) {
  const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128, kb_padded = (kb + 3) / 4 * 4;
  std::vector<float> out(static_cast<size_t>(nb * kb_padded), 1.0f);
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = 0; j < kb; ++j) out[i * kb_padded + j] = e8m0_to_float(e8m0[i * kb + j]);
  return out;
}

Fp8BlockGemm::Fp8BlockGemm() { DSV4_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

Fp8BlockGemm::~Fp8BlockGemm() { cublasLtDestroy(handle_); }

// Descriptors and algorithm for one shape. The scale pointers are set per call.
struct Fp8BlockGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;  // what algo needs
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

const Fp8BlockGemm::Plan& Fp8BlockGemm::plan_for(const Fp8GemmParams& p) {
  const int64_t m_padded = p.m_padded, n = p.n, k = p.k;
  auto& slot = plans_[{m_padded, n, k}];
  if (slot) return *slot;
  auto plan = std::make_unique<Plan>();
  // Column-major view: D^T[n, m] = W[n, k] (A, op T) x X^T[k, m] (B, op N).
  DSV4_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
           static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
           static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  // The heuristic rejects block scale modes whose scale pointers are unset (INVALID_VALUE), so
  // the plan is made with this call's pointers; run() sets each call's own.
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(p.w_scale));
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(p.x_scale));
  DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8F_E4M3, k, n, k));
  DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8F_E4M3, k, m_padded, k));
  DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, CUDA_R_16BF, n, m_padded, n));

  cublasLtMatmulPreference_t pref = nullptr;
  DSV4_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t st = [&] {
    const cublasStatus_t s1 = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kMaxWorkspaceBytes, sizeof kMaxWorkspaceBytes);
    if (s1 != CUBLAS_STATUS_SUCCESS) return s1;
    return cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1,
                                          &heuristic, &found);
  }();
  cublasLtMatmulPreferenceDestroy(pref);
  DSV4_CUBLAS_CHECK(st);
  if (found == 0)
    throw CudaError("fp8 gemm: cuBLASLt has no algorithm for m_padded=" + std::to_string(m_padded) +
                    " n=" + std::to_string(n) + " k=" + std::to_string(k));
  plan->algo = heuristic.algo;
  plan->workspace_bytes = heuristic.workspaceSize;
  slot = std::move(plan);
  return *slot;
}

void Fp8BlockGemm::run(const Fp8GemmParams& p, cudaStream_t stream) {
  if (p.k % 128 != 0 || p.m_padded % 4 != 0 || p.m_padded < 16)
    throw UsageError("fp8 gemm: k=" + std::to_string(p.k) + " must be a multiple of 128 and m_padded=" +
                     std::to_string(p.m_padded) + " a multiple of 4 and >= 16");
  const Plan& plan = plan_for(p);
  // The descriptor is read during the call only, so plans may be shared by GEMMs in flight.
  set_attr(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(p.w_scale));
  set_attr(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(p.x_scale));
  std::optional<StreamBuffer> workspace;
  if (plan.workspace_bytes > 0) workspace.emplace(plan.workspace_bytes, stream);
  const float alpha = 1.0f, beta = 0.0f;
  DSV4_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, p.w, plan.a, p.x, plan.b, &beta, p.out, plan.d,
                                   p.out, plan.d, &plan.algo, workspace ? workspace->get<void>() : nullptr,
                                   plan.workspace_bytes, stream));
}

}  // namespace dsv4::cuda
