// CpuOps MoE (MODEL.md §6): routing (sqrt-softplus scores, hash or biased top-k selection,
// normalised unbiased weights, routed scale), the clamped SwiGLU, and the routed experts summed
// per token in ascending expert order plus the shared expert.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_io.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/linear_input.h"
#include "ops/param_checks.h"

namespace dsv4::cpu {

namespace {

// torch.nn.functional.softplus with beta 1 and threshold 20.
float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

float silu(float v) { return v / (1.0f + std::exp(-v)); }

float swiglu_value(float gate, float up, float limit) {
  if (limit > 0) {
    gate = std::fmin(gate, limit);
    up = std::fmin(std::fmax(up, -limit), limit);
  }
  return silu(gate) * up;
}

}  // namespace

void CpuOps::moe_route(const MoeRouteParams& p) {
  check_params(p);
  const int64_t T = p.logits.dim(0), E = p.logits.dim(1);
  const int64_t k = p.experts.dim(1);
  const bool hash = p.tid2eid != nullptr;
  const float* bias = p.bias ? weight_f32("moe_route", p.bias, {E}) : nullptr;
  const int32_t* tid2eid = nullptr;
  const int32_t* ids = nullptr;
  int64_t vocab = 0;
  if (hash) {
    if (p.tid2eid->shape.size() != 2 || p.tid2eid->shape[1] != k)
      throw UsageError("moe_route: tid2eid " + p.tid2eid->name + " has shape " + shape_str(p.tid2eid->shape) +
                       ", expected [vocab, " + std::to_string(k) + "]");
    vocab = p.tid2eid->shape[0];
    tid2eid = p.tid2eid->data.view().data<int32_t>();
    expect_shape("moe_route", "token_ids", p.token_ids, {T});
    expect_dtype("moe_route", "token_ids", p.token_ids, DType::kI32);
    ids = p.token_ids.data<int32_t>();
  }
  const float* logits = p.logits.data<float>();
  int32_t* out_e = p.experts.data<int32_t>();
  float* out_w = p.weights.data<float>();

  pool_.parallel_for(T, [&](int64_t t) {
    std::vector<float> s(logits + t * E, logits + (t + 1) * E);
    switch (p.scoring) {
      case ScoringFunc::kSqrtSoftplus:
        for (float& v : s) v = std::sqrt(softplus(v));
        break;
      case ScoringFunc::kSigmoid:
        for (float& v : s) v = 1.0f / (1.0f + std::exp(-v));
        break;
      case ScoringFunc::kSoftmax: {
        const float mx = *std::max_element(s.begin(), s.end());
        float sum = 0;
        for (float& v : s) sum += (v = std::exp(v - mx));
        for (float& v : s) v /= sum;
        break;
      }
    }
    // The chosen experts in selection order (tid2eid's order, or by falling biased score).
    std::vector<int32_t> chosen(static_cast<size_t>(k));
    if (hash) {
      if (ids[t] < 0 || ids[t] >= vocab)
        throw UsageError("moe_route: token id " + std::to_string(ids[t]) + " is outside tid2eid's vocabulary");
      for (int64_t i = 0; i < k; ++i) {
        chosen[i] = tid2eid[ids[t] * k + i];
        if (chosen[i] < 0 || chosen[i] >= E)
          throw UsageError("moe_route: tid2eid maps token " + std::to_string(ids[t]) + " to expert " +
                           std::to_string(chosen[i]) + " of " + std::to_string(E));
      }
    } else {
      std::vector<float> biased(s);
      if (bias)
        for (int64_t e = 0; e < E; ++e) biased[e] += bias[e];
      std::vector<int32_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
      });
      std::copy(order.begin(), order.begin() + k, chosen.begin());
    }
    std::vector<float> w(static_cast<size_t>(k));
    float sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += (w[i] = s[chosen[i]]);
    for (int64_t i = 0; i < k; ++i) {
      if (p.scoring != ScoringFunc::kSoftmax) w[i] /= sum;
      w[i] *= p.route_scale;
    }
    std::vector<int32_t> by_id(static_cast<size_t>(k));
    std::iota(by_id.begin(), by_id.end(), 0);
    std::stable_sort(by_id.begin(), by_id.end(), [&](int32_t a, int32_t b) { return chosen[a] < chosen[b]; });
    for (int64_t i = 0; i < k; ++i) {
      out_e[t * k + i] = chosen[by_id[i]];
      out_w[t * k + i] = w[by_id[i]];
    }
  });
}

void CpuOps::swiglu(const SwigluParams& p) {
  check_params(p);
  const int64_t T = p.gate.dim(0), I = p.gate.dim(1);
  const bool weighted = !is_empty(p.row_weight);
  std::vector<float> g = load_all(p.gate), u = load_all(p.up);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      float h = swiglu_value(g[t * I + i], u[t * I + i], p.limit);
      if (weighted) h = p.row_weight.data<float>()[t] * h;
      g[t * I + i] = h;
    }
  store_floats(p.out, 0, T * I, g.data());
}

void CpuOps::run_expert_rows(const std::vector<float>& xq, std::span<const int64_t> x_row, const int32_t* expert,
                             const float* weight, int64_t D, std::span<const ExpertWeights> routed, float swiglu_limit,
                             ActQuant act_quant, DType act, float* out) {
  const auto R = static_cast<int64_t>(x_row.size()), E = static_cast<int64_t>(routed.size());
  // Rows of each expert, in row order.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t e = expert[r];
    if (e < 0 || e >= E) throw UsageError("moe_experts: expert id " + std::to_string(e) + " outside [0, " + std::to_string(E) + ")");
    rows_of[static_cast<size_t>(e)].push_back(r);
  }
  std::vector<int32_t> active;
  for (int64_t e = 0; e < E; ++e)
    if (!rows_of[static_cast<size_t>(e)].empty()) active.push_back(static_cast<int32_t>(e));

  pool_.parallel_for(static_cast<int64_t>(active.size()), [&](int64_t a) {
    const int32_t e = active[static_cast<size_t>(a)];
    const ExpertWeights& ew = routed[static_cast<size_t>(e)];
    if (ew.w1 == nullptr || ew.w1->shape.size() != 2) throw UsageError("moe_experts: expert " + std::to_string(e) + " has no w1");
    const int64_t I = ew.w1->shape[0];
    const float* w1 = weight_f32("moe_experts", ew.w1, {I, D});
    const float* w3 = weight_f32("moe_experts", ew.w3, {I, D});
    const float* w2 = weight_f32("moe_experts", ew.w2, {D, I});
    const std::vector<int64_t>& rows = rows_of[static_cast<size_t>(e)];
    const auto c = static_cast<int64_t>(rows.size());
    std::vector<float> xe(static_cast<size_t>(c * D)), g(static_cast<size_t>(c * I)), u(static_cast<size_t>(c * I));
    for (int64_t i = 0; i < c; ++i) std::copy_n(xq.data() + x_row[static_cast<size_t>(rows[i])] * D, D, xe.data() + i * D);
    gemm_xwt(pool_, xe.data(), D, c, D, w1, I, g.data(), I);
    gemm_xwt(pool_, xe.data(), D, c, D, w3, I, u.data(), I);
    for (int64_t i = 0; i < c; ++i) {
      float* h = g.data() + i * I;
      const float* up = u.data() + i * I;
      for (int64_t j = 0; j < I; ++j)
        h[j] = round_to(act, weight[rows[i]] * swiglu_value(round_to(act, h[j]), round_to(act, up[j]), swiglu_limit));
      quantize_activation_row(h, I, act_quant);
    }
    std::vector<float> y(static_cast<size_t>(c * D));
    gemm_xwt(pool_, g.data(), I, c, I, w2, D, y.data(), D);
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < D; ++j) out[rows[i] * D + j] = round_to(act, y[i * D + j]);
  });
}

void CpuOps::combine_rows(const float* rows, int64_t T, int64_t k, int64_t D, const float* shared, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    float* a = out + t * D;
    std::fill_n(a, D, 0.0f);
    for (int64_t s = 0; s < k; ++s)
      for (int64_t j = 0; j < D; ++j) a[j] += rows[(t * k + s) * D + j];
    if (shared != nullptr)
      for (int64_t j = 0; j < D; ++j) a[j] += shared[t * D + j];
  }
}

void CpuOps::moe_experts(const MoeExpertsParams& p) {
  check_params(p);
  moe_gate_route(p);
  const int64_t T = p.x.dim(0), D = p.x.dim(1), k = p.experts.dim(1);
  // Every (token, slot) a row of routed-expert work on the token's row.
  std::vector<int64_t> x_row(static_cast<size_t>(T * k));
  for (int64_t r = 0; r < T * k; ++r) x_row[static_cast<size_t>(r)] = r / k;
  const std::vector<float> xq = linear_input(pool_, p.x, p.act_quant);
  std::vector<float> expert_out(static_cast<size_t>(T * k * D));  // [T, k, D]
  run_expert_rows(xq, x_row, p.experts.data<int32_t>(), p.weights.data<float>(), D, p.routed, p.swiglu_limit,
                  p.act_quant, p.x.dtype(), expert_out.data());
  std::vector<float> shared;
  if (p.shared != nullptr) shared = load_all(moe_shared_expert(p).view());
  std::vector<float> acc(static_cast<size_t>(T * D));
  combine_rows(expert_out.data(), T, k, D, shared.empty() ? nullptr : shared.data(), acc.data());
  store_floats(p.out, 0, T * D, acc.data());
}

void CpuOps::moe_expert_rows(const MoeExpertRowsParams& p) {
  check_params(p);
  const int64_t R = p.x.dim(0), D = p.x.dim(1);
  std::vector<int64_t> x_row(static_cast<size_t>(R));
  std::iota(x_row.begin(), x_row.end(), 0);
  const std::vector<float> xq = linear_input(pool_, p.x, p.act_quant);
  std::vector<float> out(static_cast<size_t>(R * D));
  run_expert_rows(xq, x_row, p.experts.data<int32_t>(), p.weights.data<float>(), D, p.routed, p.swiglu_limit,
                  p.act_quant, p.x.dtype(), out.data());
  store_floats(p.out, 0, R * D, out.data());
}

void CpuOps::moe_combine(const MoeCombineParams& p) {
  check_params(p);
  const int64_t T = p.out.dim(0), D = p.out.dim(1);
  const std::vector<float> rows = load_all(p.rows);
  std::vector<float> shared;
  if (!is_empty(p.shared)) shared = load_all(p.shared);
  std::vector<float> out(static_cast<size_t>(T * D));
  combine_rows(rows.data(), T, p.k, D, shared.empty() ? nullptr : shared.data(), out.data());
  store_floats(p.out, 0, T * D, out.data());
}

}  // namespace dsv4::cpu
