// ProfilingOps: an Ops that forwards every call to another backend and adds up the wall time of
// each op, waiting for the backend after every call so that queued device work is charged to
// the op that queued it. For finding where a forward's time goes (`dsv4 bench layers
// --profile`); the waits slow what it measures, so its totals exceed an unprofiled run's.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/ops.h"

namespace dsv4 {

class ProfilingOps final : public Ops {
 public:
  explicit ProfilingOps(Ops& inner) : inner_(inner) {}

  struct Entry {
    std::string op;
    int64_t calls = 0;
    double seconds = 0;
  };
  // Every op called since the last reset, most time first.
  std::vector<Entry> entries() const;
  void reset() { totals_.clear(); }

  std::string_view name() const override { return inner_.name(); }
  void synchronize() override { inner_.synchronize(); }
  std::optional<DeviceMemory> device_memory() override { return inner_.device_memory(); }
  bool reads_packed_caches() const override { return inner_.reads_packed_caches(); }
  // The tasks' ops are profiled one by one; the backend still decides whether they overlap.
  void fork_join(const ForkJoinTasks& tasks) override { inner_.fork_join(tasks); }
  DeviceTensor alloc(DType dtype, Shape shape) override {
    return timed("alloc", [&] { return inner_.alloc(dtype, shape); });
  }
  DeviceTensor alloc_output(DType dtype, Shape shape) override {
    return timed("alloc", [&] { return inner_.alloc_output(dtype, shape); });
  }
  void upload(ConstTensorView host, TensorView dst) override {
    return timed("upload", [&] { return inner_.upload(host, dst); });
  }
  void download(ConstTensorView src, TensorView host) override {
    return timed("download", [&] { return inner_.download(src, host); });
  }
  void copy(const CopyParams& p) override {
    return timed("copy", [&] { return inner_.copy(p); });
  }
  void copy_rows(const CopyRowsParams& p) override {
    return timed("copy_rows", [&] { return inner_.copy_rows(p); });
  }
  void write_cache_rows(const WriteCacheRowsParams& p) override {
    return timed("write_cache_rows", [&] { return inner_.write_cache_rows(p); });
  }
  void edit_logits(const EditLogitsParams& p) override {
    return timed("edit_logits", [&] { return inner_.edit_logits(p); });
  }
  void mask_logits(const MaskLogitsParams& p) override {
    return timed("mask_logits", [&] { return inner_.mask_logits(p); });
  }
  void row_logprobs(const RowLogprobsParams& p) override {
    return timed("row_logprobs", [&] { return inner_.row_logprobs(p); });
  }
  void sample_rows(const SampleRowsParams& p) override {
    return timed("sample_rows", [&] { return inner_.sample_rows(p); });
  }
  Weight load_weight(const LoadWeightParams& p) override {
    return timed("load_weight", [&] { return inner_.load_weight(p); });
  }
  Weight dummy_weight(const DummyWeightParams& p) override {
    return timed("dummy_weight", [&] { return inner_.dummy_weight(p); });
  }
  void embed(const EmbedParams& p) override {
    return timed("embed", [&] { return inner_.embed(p); });
  }
  void rms_norm(const RmsNormParams& p) override {
    return timed("rms_norm", [&] { return inner_.rms_norm(p); });
  }
  void rope(const RopeParams& p) override {
    return timed("rope", [&] { return inner_.rope(p); });
  }
  void quant_sim(const QuantSimParams& p) override {
    return timed("quant_sim", [&] { return inner_.quant_sim(p); });
  }
  void hadamard(const HadamardParams& p) override {
    return timed("hadamard", [&] { return inner_.hadamard(p); });
  }
  void norm_rope_quant(const NormRopeQuantParams& p) override {
    return timed("norm_rope_quant", [&] { return inner_.norm_rope_quant(p); });
  }
  void add_broadcast(const AddBroadcastParams& p) override {
    return timed("add_broadcast", [&] { return inner_.add_broadcast(p); });
  }
  // Linears are told apart by their weight ("linear attn.wq_a").
  void linear(const LinearParams& p) override {
    return timed(op_name("linear", p.w), [&] { return inner_.linear(p); });
  }
  void grouped_linear(const GroupedLinearParams& p) override {
    return timed(op_name("grouped_linear", p.w), [&] { return inner_.grouped_linear(p); });
  }
  void hc_pre(const HcPreParams& p) override {
    return timed("hc_pre", [&] { return inner_.hc_pre(p); });
  }
  void hc_post(const HcPostParams& p) override {
    return timed("hc_post", [&] { return inner_.hc_post(p); });
  }
  void hc_head(const HcHeadParams& p) override {
    return timed("hc_head", [&] { return inner_.hc_head(p); });
  }
  void compressor_pool(const CompressorPoolParams& p) override {
    return timed("compressor_pool", [&] { return inner_.compressor_pool(p); });
  }
  void indexer_topk(const IndexerTopkParams& p) override {
    return timed("indexer_topk", [&] { return inner_.indexer_topk(p); });
  }
  void sparse_attention(const SparseAttentionParams& p) override {
    return timed("sparse_attention", [&] { return inner_.sparse_attention(p); });
  }
  void moe_route(const MoeRouteParams& p) override {
    return timed("moe_route", [&] { return inner_.moe_route(p); });
  }
  void swiglu(const SwigluParams& p) override {
    return timed("swiglu", [&] { return inner_.swiglu(p); });
  }
  // With a gate (the model's MoE), its linear and moe_route are inside this op's time.
  void moe_experts(const MoeExpertsParams& p) override {
    return timed("moe_experts", [&] { return inner_.moe_experts(p); });
  }
  void moe_expert_rows(const MoeExpertRowsParams& p) override {
    return timed("moe_expert_rows", [&] { return inner_.moe_expert_rows(p); });
  }
  void moe_combine(const MoeCombineParams& p) override {
    return timed("moe_combine", [&] { return inner_.moe_combine(p); });
  }

 private:
  // Runs `call`, waits for the backend and charges the time to `op` (not when the call throws).
  template <typename F>
  std::invoke_result_t<F&> timed(const std::string& op, F&& call) {
    const auto start = std::chrono::steady_clock::now();
    if constexpr (std::is_void_v<decltype(call())>) {
      call();
      charge(op, start);
    } else {
      auto result = call();
      charge(op, start);
      return result;
    }
  }
  void charge(const std::string& op, std::chrono::steady_clock::time_point start);
  // "op name" with the weight's name less its "layers.N." / ".weight" parts.
  static std::string op_name(const char* op, const Weight* w);

  Ops& inner_;
  std::map<std::string, Entry> totals_;
};

}  // namespace dsv4
