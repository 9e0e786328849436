// moe_experts_parallel: route, plan the rows per destination on the host, exchange, run the
// received rows, exchange back, combine (expert_parallel.h).
#include "model/expert_parallel.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace dsv4 {

void moe_experts_parallel(Ops& ops, ExpertComm& comm, const MoeExpertsParams& p, int64_t num_experts) {
  const int ranks = comm.size();
  if (num_experts <= 0 || num_experts % ranks != 0)
    throw UsageError("expert parallelism: " + std::to_string(num_experts) + " experts do not split over " +
                     std::to_string(ranks) + " ranks");
  const int64_t share = num_experts / ranks;
  if (static_cast<int64_t>(p.routed.size()) != share)
    throw UsageError("expert parallelism: rank " + std::to_string(comm.rank()) + " holds " +
                     std::to_string(p.routed.size()) + " experts, its share of " + std::to_string(num_experts) +
                     " over " + std::to_string(ranks) + " ranks is " + std::to_string(share));
  const int64_t T = p.x.dim(0), D = p.x.dim(1), k = p.experts.dim(1);
  const DType act = p.x.dtype();
  ops.moe_gate_route(p);
  std::vector<int32_t> experts(static_cast<size_t>(T * k));
  std::vector<float> weights(static_cast<size_t>(T * k));
  if (T > 0) {  // a rank without tokens only serves the others' rows
    ops.download(p.experts, host_view(experts.data(), DType::kI32, {T, k}));
    ops.download(p.weights, host_view(weights.data(), DType::kF32, {T, k}));
  }

  // Per destination rank: its (token, slot) pairs in order, their token rows, local expert ids
  // and weights.
  std::vector<std::vector<int64_t>> pairs(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < T * k; ++r) {
    const int32_t e = experts[static_cast<size_t>(r)];
    if (e < 0 || e >= num_experts)
      throw UsageError("expert parallelism: expert id " + std::to_string(e) + " outside [0, " +
                       std::to_string(num_experts) + ")");
    pairs[static_cast<size_t>(e / share)].push_back(r);
  }
  std::vector<DeviceTensor> send_x, send_ids, send_w;
  for (int dest = 0; dest < ranks; ++dest) {
    const std::vector<int64_t>& to = pairs[static_cast<size_t>(dest)];
    const auto n = static_cast<int64_t>(to.size());
    DeviceTensor x = ops.alloc(act, {n, D});
    std::vector<RowCopy> copies;
    std::vector<int32_t> ids;
    std::vector<float> w;
    for (int64_t i = 0; i < n; ++i) {
      copies.push_back({to[static_cast<size_t>(i)] / k, x.view(), i, 1});
      ids.push_back(static_cast<int32_t>(experts[static_cast<size_t>(to[static_cast<size_t>(i)])] - dest * share));
      w.push_back(weights[static_cast<size_t>(to[static_cast<size_t>(i)])]);
    }
    if (n > 0) ops.copy_rows({p.x, copies});
    DeviceTensor id_rows = ops.alloc(DType::kI32, {n, 1}), w_rows = ops.alloc(DType::kF32, {n, 1});
    if (n > 0) {
      ops.upload(host_view(ids.data(), DType::kI32, {n, 1}), id_rows.view());
      ops.upload(host_view(w.data(), DType::kF32, {n, 1}), w_rows.view());
    }
    send_x.push_back(std::move(x));
    send_ids.push_back(std::move(id_rows));
    send_w.push_back(std::move(w_rows));
  }
  const auto views = [](const std::vector<DeviceTensor>& ts) {
    std::vector<ConstTensorView> v;
    for (const DeviceTensor& t : ts) v.push_back(t.view());
    return v;
  };
  const std::vector<DeviceTensor> got_x = comm.all_to_all(ops, views(send_x));
  const std::vector<DeviceTensor> got_ids = comm.all_to_all(ops, views(send_ids));
  const std::vector<DeviceTensor> got_w = comm.all_to_all(ops, views(send_w));

  // The received rows, source after source, through this rank's experts.
  int64_t R = 0;
  for (const DeviceTensor& t : got_x) R += t.dim(0);
  DeviceTensor x_in = ops.alloc(act, {R, D}), ids_in = ops.alloc(DType::kI32, {R, 1}),
               w_in = ops.alloc(DType::kF32, {R, 1}), y = ops.alloc(act, {R, D});
  int64_t at = 0;
  for (int source = 0; source < ranks; ++source) {
    const int64_t n = got_x[static_cast<size_t>(source)].dim(0);
    if (n > 0) {
      ops.copy({got_x[static_cast<size_t>(source)].view(), slice_rows(x_in.view(), at, at + n)});
      ops.copy({got_ids[static_cast<size_t>(source)].view(), slice_rows(ids_in.view(), at, at + n)});
      ops.copy({got_w[static_cast<size_t>(source)].view(), slice_rows(w_in.view(), at, at + n)});
    }
    at += n;
  }
  if (R > 0)
    ops.moe_expert_rows({x_in.view(), ids_in.reshaped({R}).view(), w_in.reshaped({R}).view(), p.routed,
                         p.swiglu_limit, p.act_quant, y.view()});

  // Each source's results back to it; ours into their (token, slot) rows.
  std::vector<ConstTensorView> results;
  at = 0;
  for (int source = 0; source < ranks; ++source) {
    const int64_t n = got_x[static_cast<size_t>(source)].dim(0);
    results.push_back(slice_rows(ConstTensorView(y.view()), at, at + n));
    at += n;
  }
  const std::vector<DeviceTensor> back = comm.all_to_all(ops, results);
  DeviceTensor slots = ops.alloc(act, {T * k, D});
  for (int dest = 0; dest < ranks; ++dest) {
    const std::vector<int64_t>& to = pairs[static_cast<size_t>(dest)];
    std::vector<RowCopy> copies;
    for (size_t i = 0; i < to.size(); ++i) copies.push_back({static_cast<int64_t>(i), slots.view(), to[i], 1});
    if (!copies.empty()) ops.copy_rows({back[static_cast<size_t>(dest)].view(), copies});
  }
  if (T == 0) return;
  DeviceTensor shared;
  if (p.shared != nullptr) shared = ops.moe_shared_expert(p);
  ops.moe_combine({slots.view(), k, shared.empty() ? ConstTensorView() : ConstTensorView(shared.view()), p.out});
}

}  // namespace dsv4
