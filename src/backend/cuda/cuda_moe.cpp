// CudaOps MoE (MODEL.md §6): routing (scores, hash or biased top-k selection, normalised weights,
// routed scale), the clamped SwiGLU, and the routed experts. With FP8 experts in the default
// numerics the experts run on the device alone: kernels::expert_plan groups the token rows by
// expert (for a decode batch with a gate, kernels::gate_route_plan gates, routes and plans in one
// launch), and each of the three linears is one grouped kernels::fp8_mma_gemm over every expert.
// Otherwise the rows are grouped on the host and each expert's linears go through
// CudaOps::linear. Both give a row the same bits (the GEMM's order does not depend on the other
// rows), and every token's outputs are summed in ascending expert order plus the shared expert,
// which runs through linears / swiglu / linear (Ops::moe_shared_expert), on a side stream of the
// fork/join beside the device-planned experts.
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "kernels/moe/expert_plan.h"
#include "kernels/moe/expert_rows.h"
#include "kernels/moe/gate_route_plan.h"
#include "kernels/moe/moe_route.h"
#include "kernels/moe/swiglu.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

// From this many tokens the routed experts' input is quantised a token at a time and scattered to
// its k grouped rows (an 8k prefill -0.4%: 8,192 rows quantised instead of 49,152); below it each
// grouped row is gathered and quantised by its own task, which spreads a decode step's few rows
// over k times the blocks (scattering made a batch-1 step 0.4% slower: docs/PERF.md session 48).
constexpr int64_t kScatterQuantMinTokens = 512;

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

// The shared expert's output as the combine reads it (null data: no shared expert).
kernels::FloatPtr shared_ptr(const DeviceTensor& shared) {
  return shared.empty() ? kernels::FloatPtr{} : float_ptr(ConstTensorView(shared.view()));
}

}  // namespace

kernels::MoeRouteParams CudaOps::route_params(const MoeRouteParams& p) {
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
  return kp;
}

void CudaOps::moe_route(const MoeRouteParams& p) { kernels::moe_route(route_params(p), stream_); }

bool CudaOps::gate_route_plan(const MoeExpertsParams& p, const kernels::ExpertPlanParams& plan) {
  if (p.gate == nullptr) return false;
  const MoeGate& g = *p.gate;
  const int64_t T = p.x.dim(0), D = p.x.dim(1);
  if (T > kernels::kGateRoutePlanMaxTokens || g.weight == nullptr || g.weight->shape.size() != 2) return false;
  const int64_t E = g.weight->shape[0];
  const GemmWeightView w = gemm_weight("moe_experts gate", g.weight, E, D);
  // Where Ops::moe_gate_route's linear() keeps kernels::bf16_mma_gemm's order (whose bits the kernel keeps).
  if (!linear_on_bf16_mma(g.act_quant, p.x.dtype(), w.type) || E > kernels::kGateRoutePlanMaxExperts) return false;
  const DeviceTensor logits = alloc_output(DType::kF32, {T, E});
  kernels::GateRoutePlanParams k;
  k.x = p.x.data<uint16_t>();
  k.ldx = D;
  k.w = static_cast<const uint16_t*>(w.data);
  k.d = D;
  k.logits = logits.view().data<float>();
  k.route = route_params({logits.view(), g.bias, g.tid2eid, g.token_ids, g.scoring, g.route_scale, p.experts, p.weights});
  k.plan = plan;
  k.done = gate_route_done_;
  const StreamBuffer partials(static_cast<size_t>(kernels::gate_route_plan_partial_floats(E, D)) * sizeof(float), stream_,
                              arena());
  k.partials = partials.get<float>();
  if (!kernels::gate_route_plan_supports(k)) return false;
  kernels::gate_route_plan(k, stream_);
  return true;
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
    moe_gate_route(p);
    const DeviceTensor shared = p.shared != nullptr ? moe_shared_expert(p) : DeviceTensor();
    kernels::combine_experts({float_ptr(p.x), nullptr, shared_ptr(shared), float_ptr(p.out), T, 0, D}, stream_);
    return;
  }
  if (moe_experts_on_device(p)) return;
  refuse_while_capturing("moe_experts (experts grouped on the host)");
  moe_gate_route(p);
  const DeviceTensor shared = p.shared != nullptr ? moe_shared_expert(p) : DeviceTensor();

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
  const StreamBuffer index(static_cast<size_t>(N) * (2 * sizeof(int32_t) + sizeof(float)), stream_, arena());
  int32_t* d_src_token = index.get<int32_t>();
  int32_t* d_row_of = d_src_token + N;
  auto* d_row_weight = reinterpret_cast<float*>(d_row_of + N);
  // Pageable sources: each copy returns once its bytes are staged, so the vectors may go.
  DSV4_CUDA_CHECK(cudaMemcpyAsync(d_src_token, src_token.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(d_row_of, row_of.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(d_row_weight, row_weight.data(), N * sizeof(float), cudaMemcpyHostToDevice, stream_));

  // Grouped rows, all in x's dtype: the inputs, gate/up/h intermediates, and the outputs.
  const StreamBuffer xs(static_cast<size_t>(N * D) * esize, stream_, arena());
  const StreamBuffer ys(static_cast<size_t>(N * D) * esize, stream_, arena());
  const StreamBuffer gate(static_cast<size_t>(inter) * esize, stream_, arena());
  const StreamBuffer up(static_cast<size_t>(inter) * esize, stream_, arena());
  const StreamBuffer h(static_cast<size_t>(inter) * esize, stream_, arena());
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
    const ConstTensorView wg = host_view(d_row_weight + g.begin, DType::kF32, {g.count});
    swiglu({gg, ug, wg, p.swiglu_limit, hg});
    linear({hg, ew.w2, p.act_quant, yg});
  }
  kernels::combine_experts({{ys.get<void>(), p.x.dtype() == DType::kBF16}, d_row_of, shared_ptr(shared),
                            float_ptr(p.out), T, k, D},
                           stream_);
}

void CudaOps::moe_expert_rows(const MoeExpertRowsParams& p) {
  check_params(p);
  const int64_t R = p.x.dim(0);
  // moe_experts writes its experts and weights only with a gate; without one it reads them.
  const TensorView experts(const_cast<std::byte*>(p.experts.bytes()), DType::kI32, {R, 1});
  const TensorView weights(const_cast<std::byte*>(p.weights.bytes()), DType::kF32, {R, 1});
  moe_experts({p.x, experts, weights, p.routed, nullptr, p.swiglu_limit, p.act_quant, ActQuant::kNone, p.out});
}

void CudaOps::moe_combine(const MoeCombineParams& p) {
  check_params(p);
  const int64_t T = p.out.dim(0), D = p.out.dim(1);
  const kernels::FloatPtr shared = p.shared.numel() > 0 ? float_ptr(p.shared) : kernels::FloatPtr{};
  kernels::combine_experts({float_ptr(p.rows), nullptr, shared, float_ptr(p.out), T, p.k, D}, stream_);
}

bool CudaOps::moe_experts_on_device(const MoeExpertsParams& p) {
  const int64_t T = p.x.dim(0), D = p.x.dim(1), k = p.experts.dim(1), N = T * k;
  const auto E = static_cast<int32_t>(p.routed.size());
  if (!uses_fp8_mma(options_.fp8_gemm) || p.act_quant != ActQuant::kFp8Block128 ||
      p.x.dtype() != DType::kBF16 || D % 128 != 0 || E == 0 || p.routed[0].w1 == nullptr ||
      p.routed[0].w1->shape.size() != 2)
    return false;
  const int64_t I = p.routed[0].w1->shape[0];
  if (I % 128 != 0) return false;
  // Per expert: the codes (or FP4 pairs as stored), scales and FP4 shifts of w1, w3 and w2, as
  // device pointer tables. Every routed weight has expert 0's w1's layout.
  const bool fp4 = is_stored_fp4(p.routed[0].w1);
  std::vector<const void*> table(static_cast<size_t>(9 * E));
  int64_t ld_in = 0, ld_out = 0;  // scale row strides of w1/w3 and of w2
  for (int32_t e = 0; e < E; ++e) {
    const ExpertWeights& ew = p.routed[static_cast<size_t>(e)];
    const Weight* ws[3] = {ew.w1, ew.w3, ew.w2};
    for (int i = 0; i < 3; ++i) {
      if (ws[i] == nullptr || ws[i]->format == WeightFormat::kPlain) return false;
      if (is_stored_fp4(ws[i]) != fp4)
        throw UsageError("moe_experts: weight " + ws[i]->name + (fp4 ? " is not" : " is") +
                         " FP4 as stored while " + p.routed[0].w1->name + (fp4 ? " is" : " is not") +
                         "; the routed experts must share one layout");
      const int64_t rows = i < 2 ? I : D, cols = i < 2 ? D : I;
      const size_t at = static_cast<size_t>(i * E + e);
      if (fp4) {
        const Fp4WeightView v = stored_fp4_weight("moe_experts", ws[i], rows, cols);
        table[at] = v.data;
        table[at + 3 * E] = v.scale;
        table[at + 6 * E] = v.shift;
        (i < 2 ? ld_in : ld_out) = v.scale_ld;
      } else {
        const GemmWeightView v = gemm_weight("moe_experts", ws[i], rows, cols);
        table[at] = v.data;
        table[at + 3 * E] = v.scale;
        (i < 2 ? ld_in : ld_out) = v.scale_ld;
      }
    }
  }
  TableBytes bytes;
  const size_t table_at = bytes.add(table);
  const DeviceTables pointers = upload_tables(bytes);
  const auto* const* w_of = pointers.at<const uint8_t*>(table_at);
  const auto* const* s_of = reinterpret_cast<const float* const*>(w_of + 3 * E);
  const auto* const* shift_of = w_of + 6 * E;

  // The plan: rows grouped by expert and their tiles.
  // Prefill-sized groups of FP4 experts take the f16 WGMMA kernel (the staged kernel's bits,
  // converting the e2m1 weights as it goes) over tiles of up to 128 rows, by default and with
  // kWgmma (whose FP8 MMAs read e4m3 tiles only); the quantisations then write the codes' fp16
  // values, with the scales' rows padded to 4 (its TMA's rule). With kChained, its chained form,
  // the quantisations writing the values' bf16 instead.
  const int64_t rows_per_expert = (N + std::min<int64_t>(E, N) - 1) / std::min<int64_t>(E, N);
  const bool f16 = fp4 && uses_fp8_mma(options_.fp8_gemm) && rows_per_expert >= kF16WgmmaMinRowsPerExpert;
  // kChained: FP4 experts in the chained order at every size (x's values bf16, their scales folded
  // in), below those rows on the chained streamed kernel (x's values in x's own order). FP8 experts
  // keep the default's kernels and order at every size (no chained kernel reads grouped e4m3 tiles).
  const bool chained = fp4 && options_.fp8_gemm == Fp8Gemm::kChained;
  const bool chained_streamed = chained && !f16;
  const bool values = f16 || chained_streamed;  // the quantisations write values (q16), not codes
  const int32_t tile_rows = f16 ? kernels::kFp8MmaStagedTileRows : kernels::fp8_mma_tile_rows(rows_per_expert);
  const int64_t max_tiles = kernels::expert_plan_max_tiles(N, E, tile_rows);
  const int64_t span_ints = kernels::expert_plan_spans(N) * E;
  const StreamBuffer ints(static_cast<size_t>(2 * E + 3 * N + 1 + span_ints) * sizeof(int32_t), stream_, arena());
  const StreamBuffer tiles(static_cast<size_t>(max_tiles) * sizeof(kernels::Fp8MmaTile), stream_, arena());
  kernels::ExpertPlanParams plan;
  plan.experts = p.experts.data<int32_t>();
  plan.weights = p.weights.data<float>();
  plan.pairs = N;
  plan.k = static_cast<int32_t>(k);
  plan.num_experts = E;
  plan.tile_rows = tile_rows;
  plan.count = ints.get<int32_t>();
  plan.offset = plan.count + E;
  plan.src_token = plan.offset + E;
  plan.row_of = plan.src_token + N;
  plan.row_weight = reinterpret_cast<float*>(plan.row_of + N);
  plan.tile_count = reinterpret_cast<int32_t*>(plan.row_weight + N);
  plan.span_count = plan.tile_count + 1;
  plan.tiles = tiles.get<kernels::Fp8MmaTile>();
  plan.max_tiles = max_tiles;
  plan.fault = fault_device_;

  const int64_t quant_rows = f16 ? (N + 3) / 4 * 4 : N;
  const size_t code_bytes = values ? sizeof(uint16_t) : 1;

  // The grouped inputs, quantised; gate and up; h = swiglu(gate, up), quantised; the experts'
  // outputs. The quantisation gathers (or scatters) x's rows through the plan and computes h itself.
  const StreamBuffer xq(static_cast<size_t>(quant_rows * D) * code_bytes, stream_, arena());
  const StreamBuffer x_scale(static_cast<size_t>(D / 128 * quant_rows) * sizeof(float), stream_, arena());
  const StreamBuffer gate(static_cast<size_t>(N * I) * sizeof(uint16_t), stream_, arena());
  const StreamBuffer up(static_cast<size_t>(N * I) * sizeof(uint16_t), stream_, arena());
  const StreamBuffer hq(static_cast<size_t>(quant_rows * I) * code_bytes, stream_, arena());
  const StreamBuffer h_scale(static_cast<size_t>(I / 128 * quant_rows) * sizeof(float), stream_, arena());
  const StreamBuffer ys(static_cast<size_t>(N * D) * sizeof(uint16_t), stream_, arena());

  // The routing and the routed experts (plan, quantisation, grouped GEMMs) on this stream and the
  // shared expert as a side task, so that a backend with side streams overlaps them (at decode the
  // shared expert's weights stream while the routing's small kernels run, and its small kernels
  // run under the routed experts'); they meet in the combine. (Forked after the routing instead,
  // below 512 tokens, decode was 1-2% slower: docs/PERF.md session 53.)
  DeviceTensor shared;
  ForkJoinTasks tasks;
  tasks.chain = "moe";
  tasks.tokens = T;
  tasks.main = [&] {
    if (!gate_route_plan(p, plan)) {
      moe_gate_route(p);
      kernels::expert_plan(plan, stream_);
    }
    kernels::ActQuantParams x_quant{p.x.data<uint16_t>(), xq.get<uint8_t>(), x_scale.get<float>(), N, quant_rows, D};
    if (T >= kScatterQuantMinTokens) {  // a token's row quantised once, for its k rows
      x_quant.scatter_rows = plan.row_of;
      x_quant.scatter_fanout = k;
    } else {
      x_quant.src_row = plan.src_token;
    }
    if (values) x_quant.q16 = xq.get<uint16_t>();
    x_quant.q16_bf16_scaled = chained;
    x_quant.q16_natural_order = chained_streamed;
    kernels::act_quant_fp8(x_quant, stream_);

    auto grouped = [&](const uint8_t* x, const float* x_scale_of, int64_t in, int64_t out, int which, int64_t ld,
                       void* y) {
      kernels::Fp8MmaGemmParams g;
      g.x = x;
      g.x_scale = x_scale_of;
      g.x_scale_ld = quant_rows;
      if (values) {
        g.x16 = reinterpret_cast<const uint16_t*>(x);
        g.kernel = chained_streamed ? kernels::Fp8MmaKernel::kChainedStreamed
                   : chained        ? kernels::Fp8MmaKernel::kChainedBf16Wgmma
                                    : kernels::Fp8MmaKernel::kF16Wgmma;
      }
      g.w_scale_ld = ld;
      g.y = {y, true};
      g.ldy = out;
      g.m = N;
      g.n = out;
      g.k = in;
      g.tiles = plan.tiles;
      g.tile_count = plan.tile_count;
      g.max_tiles = max_tiles;
      g.tile_rows = tile_rows;
      g.group_w = w_of + which * E;
      g.group_w_scale = s_of + which * E;
      if (fp4) {
        g.w_codes = kernels::Fp8MmaWeightCodes::kE2M1;
        g.group_w_shift = shift_of + which * E;
      }
      return g;
    };
    kernels::Fp8MmaGemmParams gate_up = grouped(xq.get<uint8_t>(), x_scale.get<float>(), D, I, 0, ld_in, gate.get<void>());
    if (tile_rows <= 32) {  // streamed tiles: up in the same launch (w3 of expert e is table entry E + e)
      gate_up.second = {.w_scale_ld = ld_in, .y = {up.get<void>(), true}, .ldy = I, .n = I, .group_offset = E};
      run_fp8_mma(gate_up);
    } else {
      run_fp8_mma(gate_up);
      run_fp8_mma(grouped(xq.get<uint8_t>(), x_scale.get<float>(), D, I, 1, ld_in, up.get<void>()));
    }
    kernels::ActQuantParams h_quant{gate.get<uint16_t>(), hq.get<uint8_t>(), h_scale.get<float>(), N, quant_rows, I};
    if (values) h_quant.q16 = hq.get<uint16_t>();
    h_quant.q16_bf16_scaled = chained;
    h_quant.q16_natural_order = chained_streamed;
    h_quant.swiglu_up = up.get<uint16_t>();
    h_quant.swiglu_row_weight = plan.row_weight;
    h_quant.swiglu_limit = p.swiglu_limit;
    kernels::act_quant_fp8(h_quant, stream_);
    run_fp8_mma(grouped(hq.get<uint8_t>(), h_scale.get<float>(), I, D, 2, ld_out, ys.get<void>()));
  };
  if (p.shared != nullptr) tasks.side[0] = [&] { shared = moe_shared_expert(p); };
  fork_join(tasks);
  kernels::combine_experts({{ys.get<void>(), true}, plan.row_of, shared_ptr(shared), float_ptr(p.out), T, k, D},
                           stream_);
  return true;
}

}  // namespace dsv4::cuda
