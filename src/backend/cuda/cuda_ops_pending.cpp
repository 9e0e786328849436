// Stand-ins for the CudaOps methods another branch implements (cuda_attention.cpp,
// cuda_moe.cpp), so the backend links before that work is merged. CMake compiles this file only
// while one of those files is missing, with DSV4_CUDA_PENDING_ATTENTION / _MOE saying which;
// each stand-in throws.
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace dsv4::cuda {

namespace {

[[noreturn]] void not_in_this_build(const char* op) {
  throw UsageError(std::string("CudaOps::") + op + " is not part of this build of the CUDA backend");
}

}  // namespace

#if DSV4_CUDA_PENDING_ATTENTION
void CudaOps::compressor_pool(const CompressorPoolParams&) { not_in_this_build("compressor_pool"); }
void CudaOps::indexer_topk(const IndexerTopkParams&) { not_in_this_build("indexer_topk"); }
void CudaOps::sparse_attention(const SparseAttentionParams&) { not_in_this_build("sparse_attention"); }
#endif

#if DSV4_CUDA_PENDING_MOE
void CudaOps::moe_route(const MoeRouteParams&) { not_in_this_build("moe_route"); }
void CudaOps::swiglu(const SwigluParams&) { not_in_this_build("swiglu"); }
void CudaOps::moe_experts(const MoeExpertsParams&) { not_in_this_build("moe_experts"); }
#endif

}  // namespace dsv4::cuda
