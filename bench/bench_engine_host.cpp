// The serving engine's own host time per decode step: the scheduler, the step's bookkeeping,
// the draws' plans and the tokens' delivery, with a forward and a sampler that cost nothing (a
// runner that only advances the caches and hands back one logits tensor, and a backend whose
// sample_rows writes token 0), so that what is left is what the engine adds to a GPU step.
// Usage: bench_engine_host [STEPS]; prints ms a step at 1, 16, 64 and 256 running sequences, then
// ms a step of a queue of requests waiting behind the prefill of the prompt they share.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "config/presets.h"
#include "cpu_forwarding_ops.h"
#include "model/forward_runner.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace dsv4 {
namespace {

// The CPU backend with a draw that costs nothing (every row draws token 0).
class FreeSamplingOps final : public testing::CpuForwardingOps {
 public:
  std::string_view name() const override { return "cpu-free-sampling"; }
  void sample_rows(const SampleRowsParams& p) override { std::memset(p.out.bytes(), 0, p.out.nbytes()); }
};

// A forward that costs nothing: each sequence's caches advance by its tokens; the logits are one
// tensor of zeros per batch size.
class FreeForward final : public ForwardRunner {
 public:
  FreeForward(Ops& ops, int64_t vocab) : ops_(ops), vocab_(vocab) {}
  ForwardResult forward(const Model&, Ops&, const ForwardBatch& batch) override {
    for (const SequenceChunk& c : batch.sequences) c.cache->advance(c.num_tokens);
    const auto n = static_cast<int64_t>(batch.sequences.size());
    if (logits_.empty() || logits_.dim(0) != n) logits_ = ops_.alloc(DType::kF32, {n, vocab_});
    ForwardResult r;
    r.logits = logits_;
    return r;
  }

 private:
  Ops& ops_;
  int64_t vocab_;
  DeviceTensor logits_;
};

// The engines' config: the free forward, prefix caching on, positions up to the tiny model's 4,096.
EngineConfig free_config(FreeForward& forward, int64_t max_num_seqs) {
  EngineConfig c;
  c.max_model_len = 4096;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = 8192;
  c.enable_prefix_caching = true;
  c.runner = &forward;
  return c;
}

// The mean ms of host time a step over the engine's next `steps` steps.
double ms_a_step(Engine& e, int steps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) e.step();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

void run(int steps) {
  FreeSamplingOps ops;
  const Model model = Model::dummy(ops, preset_config("tiny"), 0);
  FreeForward forward(ops, model.config()->vocab_size);
  std::printf("sequences  ms a decode step (engine host time, free forward and draws)\n");
  for (const int n : {1, 16, 64, 256}) {
    Engine e(model, ops, free_config(forward, n));
    std::vector<RequestHandle> handles;
    for (int i = 0; i < n; ++i) {
      GenerateRequest r;
      r.prompt.assign(100, static_cast<int32_t>(i + 1));
      r.stop.max_tokens = steps + 20;
      r.stop.ignore_eos = true;
      r.sampling.temperature = 0.0f;
      handles.push_back(e.submit(r));
    }
    for (int i = 0; i < 10; ++i) e.step();  // the prefills and the first decode steps
    std::printf("%9d  %.4f\n", n, ms_a_step(e, steps));
  }
  // A queue behind a shared prompt: `queued` requests whose prompts share their first 3,584
  // tokens arrive together; the first prefills the shared part in chunks of 512 tokens (the
  // step's other tokens left to the queue) while the others wait for it to be cached
  // (Scheduler::waits_for_shared_prefix), each of those six steps looking at all of them.
  std::printf("\nqueued  ms a step while the first prefills their shared prompt (engine host time)\n");
  for (const int queued : {64, 256, 1024}) {
    EngineConfig c = free_config(forward, 16);
    c.long_prefill_token_threshold = 512;
    Engine e(model, ops, c);
    std::vector<RequestHandle> handles;
    for (int i = 0; i < queued; ++i) {
      GenerateRequest r;
      for (int j = 0; j < 3584; ++j) r.prompt.push_back(j % 1000 + 1);
      for (int j = 0; j < 64; ++j) r.prompt.push_back(1000 + i % 1000);
      r.stop.max_tokens = 1;
      handles.push_back(e.submit(r));
    }
    std::printf("%6d  %.4f\n", queued, ms_a_step(e, 6));
  }
}

}  // namespace
}  // namespace dsv4

int main(int argc, char** argv) {
  dsv4::run(argc > 1 ? std::atoi(argv[1]) : 500);
  return 0;
}
