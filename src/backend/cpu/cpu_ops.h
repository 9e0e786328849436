// CpuOps: the reference implementation of the Ops interface in plain C++ with BLAS GEMMs, the
// oracle every faster backend is checked against. Weights are dequantised exactly to fp32 at
// load; activations are kF32 or kBF16 host tensors. Work is split over a thread pool by
// independent rows, tokens or experts, so results are bit-identical for any thread count.
#pragma once

#include "core/thread_pool.h"
#include "ops/ops.h"

namespace dsv4::cpu {

class CpuOps final : public Ops {
 public:
  // threads <= 0 means std::thread::hardware_concurrency().
  explicit CpuOps(int threads = 0);

  std::string_view name() const override { return "cpu"; }
  bool reads_packed_caches() const override { return true; }

  DeviceTensor alloc(DType dtype, Shape shape) override;
  void upload(ConstTensorView host, TensorView dst) override;
  void download(ConstTensorView src, TensorView host) override;
  void copy(const CopyParams& p) override;
  void write_cache_rows(const WriteCacheRowsParams& p) override;
  void edit_logits(const EditLogitsParams& p) override;
  void mask_logits(const MaskLogitsParams& p) override;
  void row_logprobs(const RowLogprobsParams& p) override;
  void sample_rows(const SampleRowsParams& p) override;
  Weight load_weight(const LoadWeightParams& p) override;
  Weight dummy_weight(const DummyWeightParams& p) override;

  void embed(const EmbedParams& p) override;
  void rms_norm(const RmsNormParams& p) override;
  void rope(const RopeParams& p) override;
  void quant_sim(const QuantSimParams& p) override;
  void hadamard(const HadamardParams& p) override;
  void add_broadcast(const AddBroadcastParams& p) override;

  void linear(const LinearParams& p) override;
  void grouped_linear(const GroupedLinearParams& p) override;

  void hc_pre(const HcPreParams& p) override;
  void hc_post(const HcPostParams& p) override;
  void hc_head(const HcHeadParams& p) override;

  void compressor_pool(const CompressorPoolParams& p) override;
  void indexer_topk(const IndexerTopkParams& p) override;
  void sparse_attention(const SparseAttentionParams& p) override;

  void moe_route(const MoeRouteParams& p) override;
  void swiglu(const SwigluParams& p) override;
  void moe_experts(const MoeExpertsParams& p) override;
  void moe_expert_rows(const MoeExpertRowsParams& p) override;
  void moe_combine(const MoeCombineParams& p) override;

 private:
  // Rows [0, R) of routed-expert work (MoeExpertRowsParams): row r is row x_row[r] of xq (the
  // quantised inputs, [*, D]) through routed[expert[r]] scaled by weight[r], into out[r] (fp32
  // holding values rounded to act).
  void run_expert_rows(const std::vector<float>& xq, std::span<const int64_t> x_row, const int32_t* expert,
                       const float* weight, int64_t D, std::span<const ExpertWeights> routed, float swiglu_limit,
                       ActQuant act_quant, DType act, float* out);
  // out[t] = sum over slots s in order of rows[(t k + s) D ..] (+ shared[t]), fp32.
  static void combine_rows(const float* rows, int64_t T, int64_t k, int64_t D, const float* shared, float* out);

  ThreadPool pool_;
};

}  // namespace dsv4::cpu
