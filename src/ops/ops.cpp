// View helpers of the Ops interface: reshaped device tensors and row slices (pointer arithmetic
// only, so they work on device memory too), and the ops every backend composes the same way.
#include "ops/ops.h"

#include "core/error.h"
#include "ops/param_checks.h"

namespace dsv4 {

namespace {

template <typename View>
View slice_rows_impl(View v, int64_t begin, int64_t end) {
  if (v.rank() == 0 || begin < 0 || end < begin || end > v.dim(0))
    throw UsageError("rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") out of range for a tensor of shape " + shape_str(v.shape()));
  Shape shape = v.shape();
  const int64_t row_elems = shape[0] == 0 ? 0 : v.numel() / shape[0];
  shape[0] = end - begin;
  return View(v.bytes() + static_cast<size_t>(begin * row_elems) * dtype_size(v.dtype()), v.dtype(), shape);
}

}  // namespace

DeviceTensor DeviceTensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel())
    throw UsageError("cannot view a tensor of shape " + shape_str(shape_) + " as " + shape_str(shape));
  return DeviceTensor(storage_, dtype_, std::move(shape));
}

DeviceTensor DeviceTensor::part(int64_t offset, Shape shape) const {
  if (offset < 0 || offset + shape_numel(shape) > numel())
    throw UsageError("elements [" + std::to_string(offset) + ", " + std::to_string(offset + shape_numel(shape)) +
                     ") are outside a tensor of shape " + shape_str(shape_));
  std::shared_ptr<std::byte> at(storage_, storage_.get() + offset * static_cast<int64_t>(dtype_size(dtype_)));
  return DeviceTensor(std::move(at), dtype_, std::move(shape));
}

TensorView slice_rows(TensorView v, int64_t begin, int64_t end) { return slice_rows_impl(v, begin, end); }

void Ops::copy_rows(const CopyRowsParams& p) {
  check_params(p);
  for (const RowCopy& c : p.copies)
    if (c.rows > 0)
      copy({slice_rows(p.src, c.src_row, c.src_row + c.rows), slice_rows(c.dst, c.dst_row, c.dst_row + c.rows)});
}
ConstTensorView slice_rows(ConstTensorView v, int64_t begin, int64_t end) {
  return slice_rows_impl(v, begin, end);
}

void Ops::norm_rope_quant(const NormRopeQuantParams& p) {
  check_params(p);
  const int64_t vectors = p.y.dim(0) * p.y.dim(1), dim = p.y.dim(2);
  const TensorView flat(p.y.bytes(), p.y.dtype(), {vectors, dim});
  // The norm reads src itself where the copy would not change it (its dtype already y's).
  ConstTensorView norm_input = flat;
  if (p.norm && p.src.dtype() == p.y.dtype()) norm_input = ConstTensorView(p.src.bytes(), p.src.dtype(), {vectors, dim});
  else if (p.src.bytes() != p.y.bytes()) copy({p.src, p.y});
  if (p.norm) rms_norm({norm_input, p.norm_weight, p.eps, flat});
  if (p.rope_dim > 0) rope({p.y, p.positions, p.inv_freq, p.rope_dim, false});
  if (p.hadamard) hadamard({flat});
  if (p.quant_cols > 0) quant_sim({flat, p.quant_cols, p.quant_block, p.quant_format});
}

DeviceTensor Ops::moe_shared_expert(const MoeExpertsParams& p) {
  const ExpertWeights& e = *p.shared;
  const DType act = p.x.dtype();
  const int64_t T = p.x.dim(0), D = p.x.dim(1), I = e.w1->shape.at(0);
  DeviceTensor gate = alloc_output(act, {T, I}), up = alloc_output(act, {T, I});
  const LinearOut outs[2] = {{e.w1, p.shared_act_quant, gate.view()}, {e.w3, p.shared_act_quant, up.view()}};
  linears({p.x, outs});
  DeviceTensor h = alloc_output(act, {T, I});
  swiglu({gate.view(), up.view(), {}, p.swiglu_limit, h.view()});
  DeviceTensor y = alloc_output(act, {T, D});
  linear({h.view(), e.w2, p.shared_act_quant, y.view()});
  return y;
}

void Ops::moe_expert_rows(const MoeExpertRowsParams&) {
  throw UsageError("moe_expert_rows: the " + std::string(name()) + " backend does not run expert-parallel MoE yet");
}

void Ops::moe_combine(const MoeCombineParams&) {
  throw UsageError("moe_combine: the " + std::string(name()) + " backend does not run expert-parallel MoE yet");
}

void Ops::moe_gate_route(const MoeExpertsParams& p) {
  if (p.gate == nullptr) return;
  const MoeGate& g = *p.gate;
  DeviceTensor logits = alloc_output(DType::kF32, {p.x.dim(0), g.weight->shape.at(0)});
  linear({p.x, g.weight, g.act_quant, logits.view()});
  moe_route({logits.view(), g.bias, g.tid2eid, g.token_ids, g.scoring, g.route_scale, p.experts, p.weights});
}

}  // namespace dsv4
