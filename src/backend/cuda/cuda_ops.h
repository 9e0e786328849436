// CudaOps: the Ops interface on an NVIDIA GPU (Hopper, sm_90a). Tensors live in device memory;
// every op is enqueued on the backend's current stream and returns without waiting. Weights are
// kept in the formats the kernels read: FP8 linears as e4m3 plus fp32 block scales in
// cuBLASLt's layout, MXFP4 experts cast losslessly to FP8 at load (MODEL.md §14), everything
// else as stored. Results are checked against CpuOps by tests/ops.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <optional>

#include "backend/cuda/capture_arena.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/fork_join.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/op_tables.h"
#include "kernels/gemm/bf16_mma_gemm.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "ops/ops.h"

namespace dsv4::kernels {
enum class GemmWeight : uint8_t;  // kernels/gemm/simple_gemm.h
struct ExpertPlanParams;  // kernels/moe/expert_plan.h
struct MoeRouteParams;    // kernels/moe/moe_route.h
}  // namespace dsv4::kernels

namespace dsv4::cuda {

struct GemmWeightView;  // op_checks.h

// How default-mode FP8/FP4 linears (FP8 weights, FP8-quantised activations) are computed.
enum class Fp8Gemm {
  // kernels::fp8_mma_gemm: the codes on fp16 tensor cores, exact products, fp32 sums per 128-wide
  // K block, one summation order for every batch size (the default).
  kFp16Mma,
  // As kFp16Mma, except that the GEMMs of e4m3 weights kFp16Mma runs on its staged or f16 WGMMA
  // kernels (prefill sizes: see kernels::fp8_mma_gemm_choice) take Hopper's FP8 tensor cores
  // (kernels::Fp8MmaKernel::kWgmmaFp8, fp32 sums promoted every 128-wide K block; dense calls
  // TMA-fed over the codes as they are): faster, but the FP8 MMA keeps fewer bits inside a block,
  // so not kFp16Mma's numbers (docs/PERF.md has the measurements). FP4 experts kept as stored, wo_a
  // and the bf16 linears keep kFp16Mma's kernels and bits.
  kWgmma,
  // As kFp16Mma, except that the dense e4m3 linears and the routed experts' FP4 weights kept as
  // stored take the chained order at every size: every product exact and every sum fp32 as in
  // kFp16Mma, each of the four lanes one tensor-core accumulation over its K blocks instead of a
  // sum per block promoted into it. Where kFp16Mma takes its staged or f16 WGMMA kernels (dense
  // calls from kFp8MmaStagedMinRows rows that would fill the GPU, experts from
  // kF16WgmmaMinRowsPerExpert rows an expert), kernels::Fp8MmaKernel::kChainedBf16Wgmma; below,
  // kChainedStreamed, with the same bits, so a row's bits still do not depend on its batch. New
  // bits; faster prefill, slower decode (the streamed kernel converts the weight into scaled bf16:
  // docs/PERF.md has the measurements). FP8 experts keep kFp16Mma's kernels and order.
  kChained,
  // cuBLASLt's block-scaled FP8 GEMM. Hopper's FP8 MMA accumulates inside each K block with less
  // than fp32 precision, and the FP8 activation quantisation downstream turns those last-bit
  // differences into visible ones (MODEL.md §15; docs/PERF.md has the measurements).
  kCublasLt,
  // kernels::simple_gemm on CUDA cores: one fp32 FMA chain per output, the CPU's arithmetic, slow.
  // The bf16 linears (bf16 weights and activations) then stay on it too, instead of
  // kernels::bf16_mma_gemm: every linear in the CPU's arithmetic.
  kSimple,
};

// Whether `g` computes the FP8 linears with kernels::fp8_mma_gemm (kFp16Mma, kWgmma and kChained).
constexpr bool uses_fp8_mma(Fp8Gemm g) {
  return g == Fp8Gemm::kFp16Mma || g == Fp8Gemm::kWgmma || g == Fp8Gemm::kChained;
}

// Whether `g` runs the dense FP8 linears on kFp16Mma's kernels and bits (kFp16Mma and kChained).
constexpr bool dense_fp8_on_fp16_mma(Fp8Gemm g) { return g == Fp8Gemm::kFp16Mma || g == Fp8Gemm::kChained; }

// With kFp16Mma, from this many rows a dense e4m3 linear that kernels::fp8_mma_gemm would run on
// its staged kernel takes its f16 WGMMA kernel instead (the same bits): the activation
// quantisation writes x's codes as fp16 and the weight's codes are converted into fp16 scratch
// first (3 bytes moved per code), which the faster kernel repays from below 512 rows at
// V4-Flash's shapes (bench_fp8_gemm, docs/PERF.md session 20). x's scales' rows are then padded
// to 4 (its TMA's rule). wo_a's grouped bf16 x FP8 calls and the bf16 linears that would take
// their staged kernels take the bf16 WGMMA form of that kernel from the same row count, with
// kWgmma too (an estimate: their conversions move x's and the weight's bytes once more, as the
// dense ones do).
constexpr int64_t kF16WgmmaMinRows = 512;

// With kFp16Mma or kWgmma, the routed experts' grouped FP4 GEMMs take the f16 WGMMA kernel (tiles
// of up to 128 rows, each item's MMAs as wide as its rows need, the same bits) once the experts
// average this many rows (tokens x experts a token / experts); below, the streamed kernel's tiles
// of 8, 16 or 32 rows. From 16 rows (a 1k-token prefill of V4-Flash) it measured faster than the
// streamed kernel, which reads an expert's weight once per 32-row tile (docs/PERF.md session 32).
constexpr int64_t kF16WgmmaMinRowsPerExpert = 16;

// Whether a kFp16Mma linear runs the dense call `g` (its x not yet quantised) on the f16 WGMMA
// kernel, by the rule above (its weight e4m3 and 16-byte aligned). bench_fp8_gemm reports the
// kernel a linear runs by it too.
// With `chained` (kChained), from any row count: every call the staged kernel would take.
bool linear_takes_f16_wgmma(const kernels::Fp8MmaGemmParams& g, bool chained = false);

// How the default numerics' sparse attention (bf16 rows) is computed; exact math (f32) always takes
// the CPU's operation order.
enum class SparseAttention {
  // kernels::sparse_attn_mma: bf16 tensor cores, fp32 sums in the MMA's order, the same bits for a
  // token in any batch (the default: 40-50x faster than the CPU order at prefill, docs/PERF.md).
  kTensorCores,
  // kernels::sparse_attn_rows: the CPU's operation order on CUDA cores (only expf's last bit can
  // differ), the closest to the CPU reference.
  kCpuOrder,
};

struct CudaOptions {
  Fp8Gemm fp8_gemm = Fp8Gemm::kFp16Mma;
  SparseAttention sparse_attention = SparseAttention::kTensorCores;
  // Whether fork/joins (the attention layer's input chains) run their side tasks on side streams
  // (ForkJoin) or in order on the current stream (MultiStreamPolicy says why auto is the default);
  // the numbers are the same either way.
  MultiStreamPolicy multi_stream;
  // MXFP4 weights (the routed experts) kept as stored, packed e2m1 pairs with the shifts and block
  // scales of their lossless FP8 cast (Weight::data kI8 [out, in/2], aux U8 [out, in/32] shifts,
  // scale as FP8's), half the bytes of the cast, read by the routed experts' device path only:
  // the cast's bits (kernels::Fp8MmaWeightCodes::kE2M1); the FP8 linears' other GEMMs and exact
  // math refuse them. Off: cast to FP8 at load (every path reads them).
  bool fp4_experts = false;
  // The GPU the backend runs on (CUDA's device index). Its memory and streams are that device's;
  // a thread other than the one that made the backend calls bind_thread() before using it.
  int device = 0;
};

class CudaOps final : public Ops {
 public:
  // Uses options.device; throws CudaError when no device can be used or that one does not exist.
  explicit CudaOps(CudaOptions options = {});
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  std::string_view name() const override { return "cuda"; }
  int device() const { return options_.device; }
  void bind_thread() override;
  // The stream every op is enqueued on (fork_join switches it to a side stream while a side task
  // runs). Storage of tensors that die while `s` is current is freed in stream order on `s`.
  cudaStream_t stream() const { return stream_; }
  void set_stream(cudaStream_t s) {
    stream_ = s;
    alloc_state_->current = s;
  }
  // Waits for everything enqueued so far, then throws UsageError if a kernel found bad input
  // that only the device could see (an expert id out of range).
  void synchronize() override;
  // cudaMemGetInfo after trimming alloc's pool, whose high-water mark gives the peak (cuda_ops.cpp).
  std::optional<DeviceMemory> device_memory() override;
  // The tensor-core sparse attention and indexer kernels read packed entries (unpacking them into
  // the rows they hold, so the same bits as bf16 rows); the CPU-order kernel does not.
  bool reads_packed_caches() const override { return options_.sparse_attention == SparseAttention::kTensorCores; }

  DeviceTensor alloc(DType dtype, Shape shape) override;
  // Stream-ordered like alloc, without the zero fill.
  DeviceTensor alloc_output(DType dtype, Shape shape) override;
  void upload(ConstTensorView host, TensorView dst) override;
  void download(ConstTensorView src, TensorView host) override;
  void copy(const CopyParams& p) override;
  void copy_rows(const CopyRowsParams& p) override;
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
  void norm_rope_quant(const NormRopeQuantParams& p) override;
  void add_broadcast(const AddBroadcastParams& p) override;

  void linear(const LinearParams& p) override;
  // Two linears of one decode-sized x on the same tensor cores run as one launch (one activation
  // quantisation for FP8 weights); of a prefill-sized x on the WGMMA kernels, as two GEMMs of one
  // quantised (or re-laid) x, the kernels and bits of two linear() calls; anything else runs as
  // linear() calls.
  void linears(const LinearsParams& p) override;
  void grouped_linear(const GroupedLinearParams& p) override;

  void hc_pre(const HcPreParams& p) override;
  void hc_post(const HcPostParams& p) override;
  void hc_head(const HcHeadParams& p) override;

  // Implemented in cuda_attention.cpp.
  void compressor_pool(const CompressorPoolParams& p) override;
  void indexer_topk(const IndexerTopkParams& p) override;
  void sparse_attention(const SparseAttentionParams& p) override;

  // Implemented in cuda_moe.cpp.
  void moe_route(const MoeRouteParams& p) override;
  void swiglu(const SwigluParams& p) override;
  void moe_experts(const MoeExpertsParams& p) override;
  // Expert parallelism's halves (model/expert_parallel.h): rows through moe_experts' machinery
  // as tokens of one slot each, and combine_experts over rows already in token order, so that
  // the two give moe_experts' bits (a row's GEMM does not depend on the other rows).
  void moe_expert_rows(const MoeExpertRowsParams& p) override;
  void moe_combine(const MoeCombineParams& p) override;

  // Side tasks on side streams (ForkJoin) when options.multi_stream says so for tasks.tokens;
  // otherwise, and inside a side task, the sequential contract on the current stream.
  void fork_join(const ForkJoinTasks& tasks) override;

  const CudaOptions& options() const { return options_; }

  // CUDA graph capture of the ops enqueued on the current stream between begin_capture and
  // end_capture (side streams of fork/joins join the capture through their events). While
  // capturing, op tables go to device memory the graph keeps, and launch shapes come from bounds
  // that do not depend on positions (the entries the caches' block tables address: a recorded
  // step's plan sizes them by its positions bound, ForwardBatch::table_positions), so a replay at
  // a later decode step is right; upload, download and synchronize() are refused. Tensors made
  // during the capture must also die during it (their frees are graph nodes).
  void begin_capture();
  std::unique_ptr<CudaGraph> end_capture();
  // Ends a capture an op's error interrupted, dropping what was recorded. Never throws.
  void abort_capture() noexcept;
  bool capturing() const { return capture_ != nullptr; }

 private:
  // The op's tables on the device (op_tables.h): in stream order, or into graph-kept memory
  // while capturing.
  DeviceTables upload_tables(const TableBytes& bytes);
  void refuse_while_capturing(const char* what) const;
  // A copy of host memory in new device memory.
  DeviceTensor upload_new(ConstTensorView host);
  // An FP8 weight's e8m0 block scales ([ceil(rows/128), ceil(cols/128)]) as f32 device memory in
  // cuBLASLt's layout (fp8_weight_scales_for_cublaslt).
  DeviceTensor cublaslt_weight_scales(const uint8_t* e8m0, int64_t rows, int64_t cols);
  // moe_experts with the plan, the gathers and the GEMMs all on the device (FP8 experts on
  // kernels::fp8_mma_gemm); false if this call's weights or options need the host-grouped path.
  bool moe_experts_on_device(const MoeExpertsParams& p);
  // moe_route's operands, checked, as the kernels take them.
  kernels::MoeRouteParams route_params(const MoeRouteParams& p);
  // moe_gate_route and kernels::expert_plan of `plan` as one kernels::gate_route_plan launch (a
  // decode batch's routing in one kernel's latency, the same bits); false (nothing run) where the
  // call does not qualify.
  bool gate_route_plan(const MoeExpertsParams& p, const kernels::ExpertPlanParams& plan);
  // linears() of two outputs as one launch (decode sizes) or two GEMMs of one x's operand
  // (prefill sizes); false (nothing run) where the pair does not qualify.
  bool linear_pair(const LinearsParams& p);
  // linear_pair at prefill sizes: x quantised to fp16 once for both f16 WGMMA GEMMs, or re-laid
  // once for both bf16 WGMMA GEMMs, where linear() would run each on that kernel.
  bool linear_pair_on_wgmma(const LinearsParams& p, const GemmWeightView& wa, const GemmWeightView& wb);
  // x [M, K] (bf16) quantised by kernels::act_quant_fp8, its rows padded to `padded_rows`: the
  // codes (e4m3), or where `f16` their fp16 values in the f16 WGMMA kernels' K order (under
  // kChained their bf16 values times their scales), and the scales [K / 128, padded_rows]
  // (cuda_linear.cpp).
  struct QuantisedX;
  // x's quantised form: e4m3 codes, values in the MMA steps' K order (fp16 codes, or under
  // kChained bf16 values with their scales folded in: the f16 WGMMA kernels'), or scaled bf16
  // values in x's own order (kChained's streamed kernel).
  enum class XForm { kCodes, kMmaOrder, kNatural };
  QuantisedX quantise_x(const ConstTensorView& x, int64_t padded_rows, XForm form);
  // kChained's decode-sized call g (a second output allowed, x not yet quantised) on the chained
  // streamed kernel.
  void run_chained_streamed(kernels::Fp8MmaGemmParams g, const ConstTensorView& x);
  // The dense f16 WGMMA GEMM `g` of x's fp16 values x16 (act_quant_fp8's q16 form, g.x_scale its
  // scales), the weight converted to fp16 in the MMA order first (kChained: x16's and the weight's
  // bf16 values times their scales, the chained kernel).
  void run_f16_wgmma(kernels::Fp8MmaGemmParams g, const uint16_t* x16);
  // Whether linear() takes a linear of these operands to kernels::bf16_mma_gemm's summation order
  // (its streamed, staged or WGMMA form, where bf16_mma_gemm_supports the shapes; otherwise
  // kernels::simple_gemm): kernels::gate_route_plan keeps those bits where the gate's would.
  bool linear_on_bf16_mma(ActQuant act_quant, DType x, kernels::GemmWeight w) const;
  // Whether the bf16 linear `b` runs on bf16 WGMMAs (the staged kernel's shapes at prefill sizes).
  bool bf16_takes_wgmma(const kernels::Bf16MmaGemmParams& b) const;
  // The bf16 WGMMA GEMM `b` of x re-laid in the MMA order (x_mma), the weight re-laid first.
  void run_bf16_wgmma(const kernels::Bf16MmaGemmParams& b, const uint16_t* x_mma);
  // kernels::fp8_mma_gemm of `g` on the current stream, with the kernel options_.fp8_gemm picks.
  void run_fp8_mma(kernels::Fp8MmaGemmParams g);

  // Shared with the deleters of alloc's storage, so tensors that outlive this object still find
  // out how to free their memory.
  struct AllocState {
    cudaStream_t current = nullptr;  // the current stream of the CudaOps
    bool ops_alive = true;           // false once the CudaOps (and its streams) are gone
  };

  CudaOptions options_;
  int sm_count_ = 0;  // the device's SMs
  cudaStream_t owned_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<AllocState> alloc_state_ = std::make_shared<AllocState>();
  std::unique_ptr<Fp8BlockGemm> fp8_gemm_;
  std::unique_ptr<ForkJoin> fork_join_;  // made when options_.multi_stream.mode is not kOff
  // The capture in progress: the tables its ops uploaded, and the stream that uploads them
  // (outside the capture).
  struct Capture {
    std::vector<std::shared_ptr<void>> tables;
    std::shared_ptr<CaptureArena> arena;  // the forward's tensors and scratch
  };
  // Where an op's scratch (StreamBuffer) comes from: the capture's arena, or stream order.
  CaptureArena* arena() const { return capture_ != nullptr ? capture_->arena.get() : nullptr; }
  std::unique_ptr<Capture> capture_;
  cudaStream_t table_stream_ = nullptr;  // made at the first capture
  // Where kernels report bad input (kernels/fault.h): mapped host memory, [0] = the fault code,
  // [1] = the offending value; synchronize() reads and clears it.
  int32_t* fault_host_ = nullptr;
  int32_t* fault_device_ = nullptr;
  // The counters of the kernels whose last block finishes a call (kernels/last_block.cuh), zero
  // between calls, each kernel's run on one stream at a time: kernels::hc_pre_fused's per token,
  // then kernels::gate_route_plan's (gate_route_done_ points into the same allocation).
  unsigned* hc_pre_done_ = nullptr;
  unsigned* gate_route_done_ = nullptr;
};

}  // namespace dsv4::cuda
