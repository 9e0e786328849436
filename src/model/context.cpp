// ForwardContext construction (the batch's StepPlan, checked and in backend memory) and block helpers.
#include "model/context.h"

#include "core/error.h"

namespace dsv4 {

ForwardContext::ForwardContext(Ops& ops_, const ModelConfig& cfg_, const ForwardBatch& batch_, bool mtp)
    : ops(ops_), cfg(cfg_), batch(batch_), plan(cfg_, batch_, mtp), T(batch_.num_tokens()) {
  const bool exact = batch.options.exact_math;
  act = forward_act_dtype(exact);
  fp8_act = forward_fp8_act(exact);
  qat = !exact;
  const auto n = static_cast<int64_t>(plan.ints().size());
  if (batch.planned.empty()) {
    plan_ints = ops.alloc(DType::kI32, {n});
    ops.upload(host_view(plan.ints().data(), DType::kI32, {n}), plan_ints.view());
  } else {
    if (batch.planned.dtype() != DType::kI32 || batch.planned.numel() != n)
      throw UsageError("the batch's planned inputs are " + std::string(dtype_name(batch.planned.dtype())) +
                       shape_str(batch.planned.shape()) + ", its plan needs i32[" + std::to_string(n) + "]");
    plan_ints = batch.planned;
  }
  token_ids = field(plan.token_ids());
  positions = field(plan.positions());
  window_rows = field(plan.window_rows());
  slices = plan.slices();
}

PagedCache ForwardContext::compressed(size_t seq, int64_t layer) const {
  return {cache(seq).pool().compressed(layer).view(), field(plan.block_table(cfg.compress_ratio(layer), seq)).view()};
}

PagedCache ForwardContext::index_keys(size_t seq, int64_t layer) const {
  return {cache(seq).pool().index_keys(layer).view(), field(plan.block_table(cfg.compress_ratio(layer), seq)).view()};
}

PagedCache ForwardContext::window(size_t seq, int64_t layer) const {
  const DeviceTensor& ring = cache(seq).layer(layer).window;
  return {ring.reshaped({1, ring.dim(0), ring.dim(1)}).view(), field(plan.one_page_table()).view()};
}

DType forward_act_dtype(bool exact_math) { return exact_math ? DType::kF32 : DType::kBF16; }

ActQuant forward_fp8_act(bool exact_math) { return exact_math ? ActQuant::kNone : ActQuant::kFp8Block128; }

ActQuant act_quant_for(ActQuant fp8_act, const Weight& w) {
  return w.format != WeightFormat::kPlain ? fp8_act : ActQuant::kNone;
}

ActQuant act_quant_for(const ForwardContext& ctx, const Weight& w) { return act_quant_for(ctx.fp8_act, w); }

DeviceTensor linear(const ForwardContext& ctx, const DeviceTensor& x, const Weight& w, DType out) {
  DeviceTensor y = ctx.alloc(out, {x.dim(0), w.shape.at(0)});
  ctx.ops.linear({x.view(), &w, act_quant_for(ctx, w), y.view()});
  return y;
}

std::array<DeviceTensor, 2> linear_pair(const ForwardContext& ctx, const DeviceTensor& x, const Weight& a,
                                        const Weight& b, DType out) {
  std::array<DeviceTensor, 2> y = {ctx.alloc(out, {x.dim(0), a.shape.at(0)}), ctx.alloc(out, {x.dim(0), b.shape.at(0)})};
  const LinearOut outs[2] = {{&a, act_quant_for(ctx, a), y[0].view()}, {&b, act_quant_for(ctx, b), y[1].view()}};
  ctx.ops.linears({x.view(), outs});
  return y;
}

DeviceTensor rms_norm(const ForwardContext& ctx, const DeviceTensor& x, const Weight* weight) {
  DeviceTensor y = ctx.alloc(ctx.act, x.shape());
  ctx.ops.rms_norm({x.view(), weight, static_cast<float>(ctx.cfg->rms_norm_eps), y.view()});
  return y;
}

}  // namespace dsv4
