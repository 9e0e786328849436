// Choosing the compute backend of a command: `--device cpu|cuda`, the CUDA backend's
// `--multi-stream` and `--fp8-gemm`, and making that backend.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/forward_runner.h"
#include "ops/expert_comm.h"
#include "ops/fork_join.h"
#include "ops/ops.h"

namespace dsv4::tools {

enum class Device { kCpu, kCuda };

// Adds `--device cpu|cuda` (default cpu) to `cmd`.
void add_device_option(CLI::App* cmd, Device& device);

// How the CUDA backend computes the default numerics' FP8 linears (cuda::Fp8Gemm, named here so
// that builds without CUDA parse the same options).
enum class Fp8GemmChoice { kMma, kWgmma, kChained, kCublasLt, kSimple };
std::string_view fp8_gemm_choice_name(Fp8GemmChoice choice);
// Likewise for the default numerics' sparse attention (cuda::SparseAttention).
enum class AttentionChoice { kTensorCores, kCpuOrder };
std::string_view attention_choice_name(AttentionChoice choice);

// Whether the CUDA backend keeps MXFP4 weights (the routed experts) as stored (cuda::CudaOptions::
// fp4_experts); auto: where the numerics read them (fp4_experts_for).
enum class Fp4ExpertsChoice { kAuto, kOn, kOff };

// The CUDA backend's options (the CPU backend ignores them: it runs fork/joins in order and has
// one GEMM), and how many ranks a command spreads the model over (vLLM's flags; make_engine_ranks
// makes several, make_backend refuses more than one by name).
struct GpuOptions {
  MultiStreamPolicy multi_stream;
  Fp8GemmChoice fp8_gemm = Fp8GemmChoice::kMma;
  AttentionChoice attention = AttentionChoice::kTensorCores;
  bool cuda_graphs = true;
  Fp4ExpertsChoice fp4_experts = Fp4ExpertsChoice::kAuto;
  int tensor_parallel_size = 1;  // --tensor-parallel-size
  int data_parallel_size = 1;    // --data-parallel-size
  bool expert_parallel = false;  // --enable-expert-parallel
};

// Whether MXFP4 experts stay as stored: on and off as asked; auto: on where the experts' GEMMs read
// them, which are the default numerics' (--fp8-gemm mma or wgmma, not exact math). Measured on the
// H200 (docs/PERF.md, session 14): decode 5-14% faster, an 8k prefill 8% slower, half the experts'
// memory, the same bits.
bool fp4_experts_for(const GpuOptions& gpu, bool exact_math);

// Adds `--multi-stream off|on|auto` (default auto: whether the CUDA backend overlaps the attention
// layer's independent input chains on side streams), `--fp8-gemm mma|wgmma|cublaslt|simple` (default
// mma), `--attention tensor-cores|cpu-order` (default tensor-cores), `--cuda-graphs on|off`
// (default on), `--fp4-experts auto|on|off` (default auto), `--tensor-parallel-size N`,
// `--data-parallel-size N` (default 1 each) and `--enable-expert-parallel` to `cmd`.
void add_gpu_options(CLI::App* cmd, GpuOptions& gpu);

// The backend for `device`; `threads` is the CPU backend's thread count (0: all cores);
// `exact_math`: whether the command runs exact math (which reads no FP4 weights as stored).
// Throws UsageError for a tensor- or data-parallel size above 1 (naming the flag and why; several
// ranks are tools/engine_ranks.h's), for cuda
// when this build has no CUDA backend, and CudaError when no GPU can be used.
// `cuda_device`: the GPU of a CUDA backend.
std::unique_ptr<Ops> make_backend(Device device, int threads, const GpuOptions& gpu = {}, bool exact_math = false,
                                  int cuda_device = 0);

// The expert group of data-parallel ranks on `backends` (one per rank, all of one kind): ranks of
// the CPU backend exchange in process, CUDA backends through NCCL (a GPU each).
std::vector<std::unique_ptr<ExpertComm>> expert_group_for(std::span<Ops* const> backends);

// How forwards on `backend` run: CUDA graphs for decode steps on the CUDA backend when
// gpu.cuda_graphs, eagerly otherwise. `backend` must outlive the runner.
std::unique_ptr<ForwardRunner> make_forward_runner(Ops& backend, const GpuOptions& gpu);

// What a CUDA graph runner has done so far; nullopt for a runner that launches eagerly.
struct GraphRunStats {
  int64_t captures = 0;
  int64_t replays = 0;
  int64_t eager = 0;
  size_t last_graph_nodes = 0;
};
std::optional<GraphRunStats> graph_stats(const ForwardRunner& runner);

}  // namespace dsv4::tools
