// The backend factory behind `--device`, `--multi-stream`, `--fp8-gemm`, `--attention`,
// `--cuda-graphs`, `--fp4-experts` and the parallel flags. The CUDA backend exists only in builds
// configured with CUDA (DSV4_WITH_CUDA); the tools are the one place that may branch on that.
#include "tools/backend.h"

#include <string>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "tools/number_checks.h"
#if defined(DSV4_WITH_CUDA)
#include "backend/cuda/cuda_graph_forward.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/nccl_expert_comm.h"
#endif

namespace dsv4::tools {

void add_device_option(CLI::App* cmd, Device& device) {
  cmd->add_option_function<std::string>(
         "--device", [&device](const std::string& name) { device = name == "cuda" ? Device::kCuda : Device::kCpu; },
         "Compute backend: cpu (the reference) or cuda (an NVIDIA GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->default_str("cpu");
}

std::string_view fp8_gemm_choice_name(Fp8GemmChoice choice) {
  switch (choice) {
    case Fp8GemmChoice::kMma: return "mma";
    case Fp8GemmChoice::kWgmma: return "wgmma";
    case Fp8GemmChoice::kChained: return "chained";
    case Fp8GemmChoice::kCublasLt: return "cublaslt";
    case Fp8GemmChoice::kSimple: return "simple";
  }
  return "?";
}

std::string_view attention_choice_name(AttentionChoice choice) {
  switch (choice) {
    case AttentionChoice::kTensorCores: return "tensor-cores";
    case AttentionChoice::kCpuOrder: return "cpu-order";
  }
  return "?";
}

void add_gpu_options(CLI::App* cmd, GpuOptions& gpu) {
  const MultiStreamPolicy defaults;
  MultiStreamPolicy& policy = gpu.multi_stream;
  cmd->add_option_function<std::string>(
         "--multi-stream",
         [&policy](const std::string& name) {
           for (const MultiStreamMode mode : {MultiStreamMode::kOff, MultiStreamMode::kOn, MultiStreamMode::kAuto})
             if (multi_stream_mode_name(mode) == name) policy.mode = mode;
         },
         "--device cuda: run independent chains on side CUDA streams: the attention layer's compressor, "
         "indexer keys and indexer queries (or KV path) beside its Q path, the shared expert beside the "
         "routed experts: off, on, or auto (side streams for forwards of at most " +
             std::to_string(defaults.auto_max_tokens) +
             " tokens). The numbers are the same in every mode")
      ->check(CLI::IsMember({"off", "on", "auto"}))
      ->default_str(std::string(multi_stream_mode_name(defaults.mode)));
  cmd->add_option_function<std::string>(
         "--fp8-gemm",
         [&gpu](const std::string& name) {
           for (const Fp8GemmChoice c :
                {Fp8GemmChoice::kMma, Fp8GemmChoice::kWgmma, Fp8GemmChoice::kChained, Fp8GemmChoice::kCublasLt,
                 Fp8GemmChoice::kSimple})
             if (fp8_gemm_choice_name(c) == name) gpu.fp8_gemm = c;
         },
         "--device cuda: the GEMM of the FP8 linears: mma (fp16 tensor cores with fp32 sums, the same "
         "bits for any batch, the closest to the CPU reference), wgmma (as mma, with the prefill-sized e4m3 "
         "GEMMs on FP8 tensor cores: less precise sums inside each 128-wide block; slower since the FP4 experts), "
         "chained (as mma, with the FP4 experts' and dense e4m3 GEMMs summing each of their four lanes in one "
         "tensor-core accumulation at every batch size: as precise, other bits; faster prefill, slower "
         "decode), cublaslt (cuBLASLt's FP8 tensor cores: "
         "FP8's rate at prefill sizes, less precise sums) or simple (CUDA cores, slow; the bf16 "
         "linears then leave their tensor cores too: every linear in the CPU's arithmetic)")
      ->check(CLI::IsMember({"mma", "wgmma", "chained", "cublaslt", "simple"}))
      ->default_str(std::string(fp8_gemm_choice_name(GpuOptions{}.fp8_gemm)));
  cmd->add_option_function<std::string>(
         "--attention",
         [&gpu](const std::string& name) {
           for (const AttentionChoice c : {AttentionChoice::kTensorCores, AttentionChoice::kCpuOrder})
             if (attention_choice_name(c) == name) gpu.attention = c;
         },
         "--device cuda: sparse attention in the default numerics: tensor-cores (bf16 MMA, fp32 sums; "
         "the same bits for a token in any batch) or cpu-order (the CPU reference's operation order on "
         "CUDA cores: the closest to it, 10-50x slower)")
      ->check(CLI::IsMember({"tensor-cores", "cpu-order"}))
      ->default_str(std::string(attention_choice_name(GpuOptions{}.attention)));
  cmd->add_option_function<std::string>(
         "--cuda-graphs", [&gpu](const std::string& v) { gpu.cuda_graphs = v == "on"; },
         "--device cuda: run decode steps (every sequence one token) as CUDA graphs, recorded the first "
         "time a batch's state slots are seen and replayed after (on: serve and bench throughput keep "
         "their sequences in the lowest slots and pad decode batches of more than 8 to a multiple of 8, so a "
         "graph per size serves every set of requests), or launch every op eagerly (off). The numbers are "
         "the same either way")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str(GpuOptions{}.cuda_graphs ? "on" : "off");
  cmd->add_option_function<std::string>(
         "--fp4-experts",
         [&gpu](const std::string& v) {
           gpu.fp4_experts = v == "on" ? Fp4ExpertsChoice::kOn : v == "off" ? Fp4ExpertsChoice::kOff : Fp4ExpertsChoice::kAuto;
         },
         "--device cuda: keep MXFP4 weights (the routed experts) as stored, half the bytes of their "
         "lossless FP8 cast and the same results, read by the experts' GEMMs of the default numerics "
         "(on; --exact-math and --fp8-gemm cublaslt or simple refuse them), or cast them to FP8 at "
         "load (off); auto: on with --fp8-gemm mma, wgmma or chained without --exact-math, else off. On the "
         "H200 in session 14 FP4 decoded 5-14% faster and prefilled 8% slower than the cast; the "
         "prefill's FP4 GEMM has been rebuilt since (docs/PERF.md, sessions 22-25)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->default_str("auto");
  cmd->add_option("--tensor-parallel-size", gpu.tensor_parallel_size,
                  "Devices each layer is split over (vLLM's flag). Only 1: DeepSeek-V4 has one KV head, so "
                  "tensor-parallel attention would keep the whole KV cache on every device; several devices run "
                  "data-parallel attention with expert parallelism instead (--data-parallel-size N "
                  "--enable-expert-parallel)")
      ->check(positive_number())
      ->default_str("1");
  cmd->add_option("--data-parallel-size", gpu.data_parallel_size,
                  "Ranks that each run attention for their own requests, with --enable-expert-parallel each "
                  "holding 1/N of the routed experts and exchanging tokens with the others at every MoE layer "
                  "(vLLM's flags). serve, bench throughput and bench step, in one process with a thread per rank: on "
                  "--device cpu a backend per rank, on --device cuda GPU r for rank r, exchanging through NCCL")
      ->check(positive_number())
      ->default_str("1");
  cmd->add_flag("--enable-expert-parallel", gpu.expert_parallel,
                "Spread the routed experts over the data-parallel ranks, 1/N each (vLLM's flag): needed with "
                "--data-parallel-size above 1; with one rank every expert stays on it and the flag changes "
                "nothing");
}

namespace {

// Refuses what the parallel flags ask beyond one device (make_engine_ranks takes several ranks),
// naming the flag and what to use.
void check_parallel_sizes(const GpuOptions& gpu) {
  if (gpu.tensor_parallel_size > 1)
    throw UsageError("--tensor-parallel-size " + std::to_string(gpu.tensor_parallel_size) +
                     ": dsv4 does not split layers over devices: DeepSeek-V4 has one KV head, so every device "
                     "would hold the whole KV cache; several devices run data-parallel attention with expert "
                     "parallelism instead (--data-parallel-size N --enable-expert-parallel)");
  if (gpu.data_parallel_size > 1)
    throw UsageError("--data-parallel-size " + std::to_string(gpu.data_parallel_size) +
                     ": only serve, bench throughput and bench step run several data-parallel ranks");
}

}  // namespace

bool fp4_experts_for(const GpuOptions& gpu, bool exact_math) {
  switch (gpu.fp4_experts) {
    case Fp4ExpertsChoice::kOn: return true;
    case Fp4ExpertsChoice::kOff: return false;
    case Fp4ExpertsChoice::kAuto:
      return !exact_math && (gpu.fp8_gemm == Fp8GemmChoice::kMma || gpu.fp8_gemm == Fp8GemmChoice::kWgmma ||
                             gpu.fp8_gemm == Fp8GemmChoice::kChained);
  }
  return false;
}

std::unique_ptr<ForwardRunner> make_forward_runner(Ops& backend, const GpuOptions& gpu) {
#if defined(DSV4_WITH_CUDA)
  if (auto* cuda_ops = dynamic_cast<cuda::CudaOps*>(&backend); cuda_ops != nullptr && gpu.cuda_graphs)
    return std::make_unique<cuda::CudaGraphForward>(*cuda_ops);
#else
  (void)backend;
  (void)gpu;
#endif
  return std::make_unique<EagerForward>();
}

std::optional<GraphRunStats> graph_stats(const ForwardRunner& runner) {
#if defined(DSV4_WITH_CUDA)
  if (const auto* graphs = dynamic_cast<const cuda::CudaGraphForward*>(&runner); graphs != nullptr) {
    const cuda::CudaGraphForward::Stats& s = graphs->stats();
    return GraphRunStats{s.captures, s.replays, s.eager, s.last_graph_nodes};
  }
#else
  (void)runner;
#endif
  return std::nullopt;
}

std::unique_ptr<Ops> make_backend(Device device, int threads, const GpuOptions& gpu, bool exact_math, int cuda_device) {
  check_parallel_sizes(gpu);
  if (device == Device::kCpu) return std::make_unique<cpu::CpuOps>(threads);
#if defined(DSV4_WITH_CUDA)
  cuda::CudaOptions options;
  options.multi_stream = gpu.multi_stream;
  options.fp8_gemm = gpu.fp8_gemm == Fp8GemmChoice::kCublasLt ? cuda::Fp8Gemm::kCublasLt
                     : gpu.fp8_gemm == Fp8GemmChoice::kWgmma  ? cuda::Fp8Gemm::kWgmma
                     : gpu.fp8_gemm == Fp8GemmChoice::kChained ? cuda::Fp8Gemm::kChained
                     : gpu.fp8_gemm == Fp8GemmChoice::kSimple ? cuda::Fp8Gemm::kSimple
                                                              : cuda::Fp8Gemm::kFp16Mma;
  options.sparse_attention = gpu.attention == AttentionChoice::kCpuOrder ? cuda::SparseAttention::kCpuOrder
                                                                         : cuda::SparseAttention::kTensorCores;
  options.fp4_experts = fp4_experts_for(gpu, exact_math);
  options.device = cuda_device;
  return std::make_unique<cuda::CudaOps>(options);
#else
  (void)gpu;
  (void)exact_math;
  (void)cuda_device;
  throw UsageError("--device cuda: this build of dsv4 has no CUDA backend (configure with -DDSV4_CUDA=ON)");
#endif
}

std::vector<std::unique_ptr<ExpertComm>> expert_group_for(std::span<Ops* const> backends) {
#if defined(DSV4_WITH_CUDA)
  std::vector<cuda::CudaOps*> gpus;
  for (Ops* ops : backends)
    if (auto* gpu = dynamic_cast<cuda::CudaOps*>(ops); gpu != nullptr) gpus.push_back(gpu);
  if (!gpus.empty()) {
    if (gpus.size() != backends.size()) throw UsageError("an expert group's ranks must all be on one kind of backend");
    return cuda::nccl_expert_group(gpus);
  }
#endif
  return in_process_expert_group(static_cast<int>(backends.size()));
}

}  // namespace dsv4::tools
