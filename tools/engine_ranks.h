// What an engine runs on, from a command's flags: one backend and model, or with
// `--data-parallel-size N --enable-expert-parallel` N ranks (runtime/engine.h "Data parallelism"),
// each a backend of its own (on CUDA, a GPU each) whose model holds 1/N of the routed experts,
// joined by an expert group. One process with a thread per rank: NCCL's communicators for all the
// GPUs come from one call (ncclCommInitAll), the CPU's exchange is a copy between the ranks'
// memories, and the engine's lockstep needs no second process to coordinate.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/forward_runner.h"
#include "model/model.h"
#include "ops/expert_comm.h"
#include "ops/ops.h"
#include "runtime/engine.h"
#include "tools/backend.h"
#include "tools/model_source.h"

namespace dsv4::tools {

struct EngineRanks {
  std::vector<std::unique_ptr<Ops>> backends;  // by rank
  std::vector<Model> models;                   // by rank: the rank's share of the experts
  std::vector<std::unique_ptr<ExpertComm>> group;  // empty with one rank
  std::unique_ptr<ForwardRunner> runner;       // one rank: make_forward_runner's; several run eagerly

  std::vector<EngineRank> ranks() const;
  const Model& model() const { return models.front(); }
};

// One backend per rank `gpu`'s parallel flags ask for (one without data parallelism): on the CPU
// each with `threads` / N of the threads (0: the machine's), on CUDA rank r on GPU r. UsageError
// naming the flag for a data-parallel size above 1 without --enable-expert-parallel (dsv4 spreads
// the MoE layers only by experts), and for what make_backend refuses.
std::vector<std::unique_ptr<Ops>> make_rank_backends(Device device, int threads, const GpuOptions& gpu,
                                                     bool exact_math);
// The expert group of ranks on `backends` (make_rank_backends'): in process on the CPU, through
// NCCL on CUDA (tools/backend.h expert_group_for).
std::vector<std::unique_ptr<ExpertComm>> make_expert_group(std::span<const std::unique_ptr<Ops>> backends);

// The ranks `gpu`'s parallel flags ask for (make_rank_backends), each loading its share of
// `source`'s weights. Several
// ranks run eagerly; one runs through make_forward_runner's runner.
EngineRanks make_engine_ranks(Device device, int threads, const GpuOptions& gpu, bool exact_math,
                              const ModelSource& source);

}  // namespace dsv4::tools
