// CudaOps MoE (MODEL.md §6): routing (scores, hash or biased top-k selection, normalised weights,
// routed scale), the clamped SwiGLU, and the routed experts: the token rows grouped by expert on
// the host, each expert's three linears through CudaOps::linear (so they quantise exactly as
// LinearParams says), and every token's outputs summed in ascending expert order plus the
// shared expert.
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "kernels/moe/expert_rows.h"
#include "kernels/moe/moe_route.h"
#include "kernels/moe/swiglu.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

kernels::RouteScoring route_scoring(ScoringFunc f) {
  switch (f) {
    case ScoringFunc::kSqrtSoftplus: return kernels::RouteScoring::kSqrtSoftplus;
    case ScoringFunc::kSigmoid: return kernels::RouteScoring::kSigmoid;
    case ScoringFunc::kSoftmax: return kernels::RouteScoring::kSoftmax;
  }
  throw UsageError("moe_route: unknown scoring function");
}

// Checks that an expert's weight is 2-D [rows, cols].
void expect_expert_weight(const Weight* w, int64_t expert, const char* which, const Shape& shape) {
  if (w == nullptr)
    throw UsageError("moe_experts: expert " + std::to_string(expert) + " has no " + which);
  if (w->shape != shape)
    throw UsageError("moe_experts: weight " + w->name + " has shape " + shape_str(w->shape) + ", expected " +
                     shape_str(shape));
}

}  // namespace

void CudaOps::moe_route(const MoeRouteParams& p) {
  check_params(p);
  const int64_t T = p.logits.dim(0), E = p.logits.dim(1);
  const int64_t k = p.experts.dim(1);
  if (k > kernels::kMaxRouteK)
    throw UsageError("moe_route: " + std::to_string(k) + " experts per token, the CUDA backend allows up to " +
                     std::to_string(kernels::kMaxRouteK));
  kernels::MoeRouteParams kp;
  kp.logits = p.logits.data<float>();
  if (p.bias) kp.bias = weight_floats("moe_route", p.bias, {E});
  if (p.tid2eid != nullptr) {
    const Weight& t2e = *p.tid2eid;
    if (t2e.shape.size() != 2 || t2e.shape[1] != k)
      throw UsageError("moe_route: tid2eid " + t2e.name + " has shape " + shape_str(t2e.shape) + ", expected [vocab, " +
                       std::to_string(k) + "]");
    const DType dt = t2e.data.dtype();
    if ((dt != DType::kI32 && dt != DType::kI64) || t2e.data.numel() != shape_numel(t2e.shape))
      throw UsageError("moe_route: tid2eid " + t2e.name + " must hold i32 or i64 expert ids");
    kp.tid2eid = t2e.data.view().bytes();
    kp.tid2eid_i64 = dt == DType::kI64;
    kp.vocab = t2e.shape[0];
    expect_shape("moe_route", "token_ids", p.token_ids, {T});
    expect_dtype("moe_route", "token_ids", p.token_ids, DType::kI32);
    kp.token_ids = p.token_ids.data<int32_t>();
  }
  kp.scoring = route_scoring(p.scoring);
  kp.route_scale = p.route_scale;
  kp.experts = p.experts.data<int32_t>();
  kp.weights = p.weights.data<float>();
  kp.tokens = T;
  kp.num_experts = E;
  kp.k = k;
  kernels::moe_route(kp, stream_);
}

void CudaOps::swiglu(const SwigluParams& p) {
  check_params(p);
  const int64_t T = p.gate.dim(0), I = p.gate.dim(1);
  const bool weighted = !is_empty(p.row_weight);
  kernels::swiglu({float_ptr(p.gate), float_ptr(p.up), weighted ? p.row_weight.data<float>() : nullptr, float_ptr(p.out),
                   p.limit, T, I},
                  stream_);
}

void CudaOps::moe_experts(const MoeExpertsParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), D = p.x.dim(1);
  const int64_t k = p.experts.dim(1), E = static_cast<int64_t>(p.routed.size());
  const int64_t N = T * k;
  if (N == 0) {
    kernels::combine_experts({float_ptr(p.x), nullptr, float_ptr(p.shared), float_ptr(p.out), T, 0, D}, stream_);
    return;
  }

  // The routing, on the host: each expert's rows (token * k + slot) in token order.
  std::vector<int32_t> experts(static_cast<size_t>(N));
  std::vector<float> weights(static_cast<size_t>(N));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(experts.data(), p.experts.bytes(), N * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(weights.data(), p.weights.bytes(), N * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  for (int64_t r = 0; r < N; ++r) {
    const int32_t e = experts[static_cast<size_t>(r)];
    if (e < 0 || e >= E)
      throw UsageError("moe_experts: expert id " + std::to_string(e) + " outside [0, " + std::to_string(E) + ")");
    rows_of[static_cast<size_t>(e)].push_back(r);
  }

  // Expert order: row i of the grouped buffers is (token, slot) order[i]; per active expert its
  // first grouped row and the offset of its [rows, I] intermediates.
  struct Group {
    int64_t expert, begin, count, inter;
  };
  std::vector<Group> groups;
  std::vector<int32_t> src_token(static_cast<size_t>(N)), row_of(static_cast<size_t>(N));
  std::vector<float> row_weight(static_cast<size_t>(N));
  int64_t next = 0, inter = 0;
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t>& rows = rows_of[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const ExpertWeights& ew = p.routed[static_cast<size_t>(e)];
    if (ew.w1 == nullptr || ew.w1->shape.size() != 2)
      throw UsageError("moe_experts: expert " + std::to_string(e) + " has no w1");
    const int64_t I = ew.w1->shape[0];
    expect_expert_weight(ew.w1, e, "w1", {I, D});
    expect_expert_weight(ew.w3, e, "w3", {I, D});
    expect_expert_weight(ew.w2, e, "w2", {D, I});
    const auto c = static_cast<int64_t>(rows.size());
    groups.push_back({e, next, c, inter});
    for (int64_t i = 0; i < c; ++i) {
      const int64_t r = rows[static_cast<size_t>(i)];
      src_token[static_cast<size_t>(next + i)] = static_cast<int32_t>(r / k);
      row_weight[static_cast<size_t>(next + i)] = weights[static_cast<size_t>(r)];
      row_of[static_cast<size_t>(r)] = static_cast<int32_t>(next + i);
    }
    next += c;
    inter += c * I;
  }

  const size_t esize = dtype_size(p.x.dtype());
  const StreamBuffer index(static_cast<size_t>(N) * (2 * sizeof(int32_t) + sizeof(float)), stream_);
  int32_t* d_src_token = index.get<int32_t>();
  int32_t* d_row_of = d_src_token + N;
  auto* d_row_weight = reinterpret_cast<float*>(d_row_of + N);
  // Pageable sources: each copy returns once its bytes are staged, so the vectors may go.
  DSV4_CUDA_CHECK(cudaMemcpyAsync(d_src_token, src_token.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(d_row_of, row_of.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(d_row_weight, row_weight.data(), N * sizeof(float), cudaMemcpyHostToDevice, stream_));

  // Grouped rows, all in x's dtype: the inputs, gate/up/h intermediates, and the outputs.
  const StreamBuffer xs(static_cast<size_t>(N * D) * esize, stream_);
  const StreamBuffer ys(static_cast<size_t>(N * D) * esize, stream_);
  const StreamBuffer gate(static_cast<size_t>(inter) * esize, stream_);
  const StreamBuffer up(static_cast<size_t>(inter) * esize, stream_);
  const StreamBuffer h(static_cast<size_t>(inter) * esize, stream_);
  kernels::gather_rows({p.x.bytes(), d_src_token, xs.get<void>(), N, D * static_cast<int64_t>(esize)}, stream_);
  auto view = [&](const StreamBuffer& b, int64_t offset, Shape shape) {
    return TensorView(b.get<std::byte>() + offset * static_cast<int64_t>(esize), p.x.dtype(), std::move(shape));
  };
  for (const Group& g : groups) {
    const ExpertWeights& ew = p.routed[static_cast<size_t>(g.expert)];
    const int64_t I = ew.w1->shape[0];
    const TensorView xg = view(xs, g.begin * D, {g.count, D}), yg = view(ys, g.begin * D, {g.count, D});
    const TensorView gg = view(gate, g.inter, {g.count, I}), ug = view(up, g.inter, {g.count, I});
    const TensorView hg = view(h, g.inter, {g.count, I});
    linear({xg, ew.w1, p.act_quant, gg});
    linear({xg, ew.w3, p.act_quant, ug});
    const ConstTensorView wg(reinterpret_cast<const std::byte*>(d_row_weight + g.begin), DType::kF32, {g.count});
    swiglu({gg, ug, wg, p.swiglu_limit, hg});
    linear({hg, ew.w2, p.act_quant, yg});
  }
  kernels::combine_experts({{ys.get<void>(), p.x.dtype() == DType::kBF16}, d_row_of, float_ptr(p.shared),
                            float_ptr(p.out), T, k, D},
                           stream_);
}

}  // namespace dsv4::cuda
