// An Ops that hands every op to a CpuOps of its own, for tests that watch or change a few ops
// (a derived class overrides those and keeps the CPU's behaviour for the rest).
#pragma once

#include "backend/cpu/cpu_ops.h"

namespace dsv4::testing {

class CpuForwardingOps : public Ops {
 public:
  bool reads_packed_caches() const override { return cpu_.reads_packed_caches(); }
  DeviceTensor alloc(DType dtype, Shape shape) override { return cpu_.alloc(dtype, std::move(shape)); }
  void upload(ConstTensorView host, TensorView dst) override { cpu_.upload(host, dst); }
  void download(ConstTensorView src, TensorView host) override { cpu_.download(src, host); }
  void copy(const CopyParams& p) override { cpu_.copy(p); }
  void write_cache_rows(const WriteCacheRowsParams& p) override { cpu_.write_cache_rows(p); }
  void edit_logits(const EditLogitsParams& p) override { cpu_.edit_logits(p); }
  void mask_logits(const MaskLogitsParams& p) override { cpu_.mask_logits(p); }
  void row_logprobs(const RowLogprobsParams& p) override { cpu_.row_logprobs(p); }
  void sample_rows(const SampleRowsParams& p) override { cpu_.sample_rows(p); }
  Weight load_weight(const LoadWeightParams& p) override { return cpu_.load_weight(p); }
  Weight dummy_weight(const DummyWeightParams& p) override { return cpu_.dummy_weight(p); }
  void embed(const EmbedParams& p) override { cpu_.embed(p); }
  void rms_norm(const RmsNormParams& p) override { cpu_.rms_norm(p); }
  void rope(const RopeParams& p) override { cpu_.rope(p); }
  void quant_sim(const QuantSimParams& p) override { cpu_.quant_sim(p); }
  void hadamard(const HadamardParams& p) override { cpu_.hadamard(p); }
  void add_broadcast(const AddBroadcastParams& p) override { cpu_.add_broadcast(p); }
  void linear(const LinearParams& p) override { cpu_.linear(p); }
  void grouped_linear(const GroupedLinearParams& p) override { cpu_.grouped_linear(p); }
  void hc_pre(const HcPreParams& p) override { cpu_.hc_pre(p); }
  void hc_post(const HcPostParams& p) override { cpu_.hc_post(p); }
  void hc_head(const HcHeadParams& p) override { cpu_.hc_head(p); }
  void compressor_pool(const CompressorPoolParams& p) override { cpu_.compressor_pool(p); }
  void indexer_topk(const IndexerTopkParams& p) override { cpu_.indexer_topk(p); }
  void sparse_attention(const SparseAttentionParams& p) override { cpu_.sparse_attention(p); }
  void moe_route(const MoeRouteParams& p) override { cpu_.moe_route(p); }
  void swiglu(const SwigluParams& p) override { cpu_.swiglu(p); }
  void moe_experts(const MoeExpertsParams& p) override { cpu_.moe_experts(p); }
  void moe_expert_rows(const MoeExpertRowsParams& p) override { cpu_.moe_expert_rows(p); }
  void moe_combine(const MoeCombineParams& p) override { cpu_.moe_combine(p); }

 protected:
  cpu::CpuOps cpu_{2};
};

}  // namespace dsv4::testing
