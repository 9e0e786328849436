// Decode steps as CUDA graphs (CudaGraphForward) against the same steps launched eagerly: every
// step's logits must be the same bytes, with the attention fork/join on one stream and on side
// streams inside the graph, when the batch's sequences change (a new graph, then an old one
// replayed), with the compressed caches in small pages of a shared pool taken between replays,
// over many steps of random sequence sets (the run compute-sanitizer's memcheck takes in
// scripts/gpu_run.sh), for the next sequences in a graph's state slots, and through the serving
// engine (continuous batching: prefill chunks between graph steps, requests joining and leaving
// through the same slots). Skips where no GPU exists.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cuda_graph_forward.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "model_test_util.h"
#include "runtime/engine.h"

namespace dsv4::testing {
namespace {

std::vector<float> logits_of(Ops& ops, const ForwardResult& r) {
  Tensor host(DType::kF32, r.logits.shape());
  ops.download(r.logits.view(), host.view());
  return to_floats(host.view());
}

// One set of sequences decoded in lockstep by two runners on two sets of caches. The eager side's
// sequences have pools of their own (one page each); the graph side's too, or take pages of
// `graph_pool` when one is given.
class Lockstep {
 public:
  Lockstep(const Model& model, Ops& ops, const std::vector<int64_t>& prompts, int64_t steps,
           const std::shared_ptr<CachePool>& graph_pool = nullptr)
      : model_(model), ops_(ops) {
    const int64_t V = model.config()->vocab_size;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ids_.push_back(test_ids(prompts[i] + steps, V, 50 + static_cast<uint32_t>(i)));
      for (auto* caches : {&eager_caches_, &graph_caches_}) {
        const int64_t capacity = prompts[i] + steps;
        caches->push_back(caches == &graph_caches_ && graph_pool != nullptr ? model.new_sequence(ops, graph_pool, capacity)
                                                                            : model.new_sequence(ops, capacity, false));
        ForwardBatch prefill;
        prefill.options.logits = LogitsFor::kNone;
        prefill.add(caches->back(), std::span(ids_.back()).first(static_cast<size_t>(prompts[i])));
        model.forward(ops, prefill);
      }
    }
  }

  // One decode step of the listed sequences on both sides; fails the test on the first differing
  // logit.
  void step(ForwardRunner& graphs, const std::vector<size_t>& which, const std::string& what) {
    EagerForward eager;
    const std::vector<float> want = run(eager, eager_caches_, which), got = run(graphs, graph_caches_, which);
    ASSERT_EQ(got.size(), want.size()) << what;
    if (std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) != 0) {
      size_t i = 0;
      while (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++i;
      FAIL() << what << ": logit " << i << " of " << want.size() << " is " << got[i] << " through the graph, "
             << want[i] << " eagerly";
    }
  }

 private:
  std::vector<float> run(ForwardRunner& runner, std::vector<SequenceCache>& caches, const std::vector<size_t>& which) {
    ForwardBatch batch;
    batch.options.logits = LogitsFor::kLastTokenOfSequence;
    for (size_t s : which) batch.add(caches[s], std::span(ids_[s]).subspan(static_cast<size_t>(caches[s].length()), 1));
    return logits_of(ops_, runner.forward(model_, ops_, batch));
  }

  const Model& model_;
  Ops& ops_;
  std::vector<std::vector<int32_t>> ids_;
  std::vector<SequenceCache> eager_caches_, graph_caches_;
};

class CudaGraphs : public ::testing::TestWithParam<MultiStreamMode> {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device on this machine";
    cuda::CudaOptions options;
    options.multi_stream.mode = GetParam();
    ops_ = std::make_unique<cuda::CudaOps>(options);
    model_ = std::make_unique<Model>(Model::load(*ops_, tiny_model_dir()));
  }
  std::unique_ptr<cuda::CudaOps> ops_;
  std::unique_ptr<Model> model_;
};

// Three sequences past C4 and C128 block boundaries as they decode; the middle one leaves for a
// while (a second graph) and comes back (the first graph again).
TEST_P(CudaGraphs, DecodeStepsAreTheEagerBitsAcrossBatchChanges) {
  const int64_t steps = 140;
  Lockstep run(*model_, *ops_, {3, 70, 126}, steps);
  cuda::CudaGraphForward graphs(*ops_);
  for (int64_t s = 0; s < steps; ++s) {
    const bool middle_away = s >= 40 && s < 50;
    const std::vector<size_t> which = middle_away ? std::vector<size_t>{0, 2} : std::vector<size_t>{0, 1, 2};
    ASSERT_NO_FATAL_FAILURE(run.step(graphs, which, "step " + std::to_string(s)));
  }
  // The middle sequence missed ten steps: it has ten tokens to go, alone.
  for (int64_t s = 0; s < 10; ++s) ASSERT_NO_FATAL_FAILURE(run.step(graphs, {1}, "catch-up " + std::to_string(s)));
  const cuda::CudaGraphForward::Stats& st = graphs.stats();
  EXPECT_EQ(st.captures, 3);  // {0, 1, 2}, {0, 2}, {1}
  EXPECT_EQ(st.replays, steps + 10 - 3);
  EXPECT_EQ(st.eager, 0);
  std::printf("[measured] graphs (multi-stream %s): %lld captures, %lld replays, %zu nodes in the last graph\n",
              std::string(multi_stream_mode_name(GetParam())).c_str(), static_cast<long long>(st.captures),
              static_cast<long long>(st.replays), st.last_graph_nodes);
}

// Graphs recorded for positions below a bound smaller than the caches' capacity (launch shapes
// sized by it, not by the capacity): the steps below it replay, the first step past it records
// the next power of two, and every step has the eager bits (prompts end at 203 and 250: bounds
// 256, 512 and 1024 as they decode 300 tokens, the capacities 503 and 550).
TEST_P(CudaGraphs, AGraphServesPositionsBelowItsBoundAndAStepPastItRecordsTheNext) {
  const int64_t steps = 300;
  Lockstep run(*model_, *ops_, {203, 250}, steps);
  cuda::CudaGraphForward graphs(*ops_, 8, 128);
  for (int64_t s = 0; s < steps; ++s) ASSERT_NO_FATAL_FAILURE(run.step(graphs, {0, 1}, "step " + std::to_string(s)));
  EXPECT_EQ(graphs.stats().captures, 3);
  EXPECT_EQ(graphs.stats().replays, steps - 3);
}

// The graph side's compressed caches in 2-row pages of one shared pool, taken as the sequences
// grow, so replays read block tables that changed since the capture (new pages, interleaved
// between the sequences), and packed as FP8 entries and MXFP4 keys; the eager side has one page
// per sequence of bf16 rows. The same bits.
TEST_P(CudaGraphs, SmallSharedPagesTakenBetweenReplaysKeepTheEagerBits) {
  const int64_t steps = 140;
  const std::vector<int64_t> prompts = {3, 70, 126};
  const std::shared_ptr<CachePool> pool =
      model_->new_cache_pool(*ops_, CachePool::pages_for(model_->config(), 3, 126 + steps, 2), DType::kF8E4M3);
  Lockstep run(*model_, *ops_, prompts, steps, pool);
  cuda::CudaGraphForward graphs(*ops_);
  for (int64_t s = 0; s < steps; ++s)
    ASSERT_NO_FATAL_FAILURE(run.step(graphs, {0, 1, 2}, "step " + std::to_string(s)));
  EXPECT_EQ(graphs.stats().captures, 1);
  EXPECT_EQ(graphs.stats().eager, 0);
}

// Many steps of random sets of sequences: more sets than the runner keeps graphs, so graphs are
// dropped, recaptured and replayed in every order; the bits stay the eager ones.
TEST_P(CudaGraphs, RandomSequenceSetsKeepTheEagerBits) {
  const int64_t sequences = 5, steps = 120;
  Lockstep run(*model_, *ops_, {1, 4, 9, 33, 128}, steps);
  cuda::CudaGraphForward graphs(*ops_, 4);
  std::mt19937 rng(7);
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<size_t> which;
    // Sequence 0 always, so each step advances someone; the others at random.
    for (size_t i = 0; i < static_cast<size_t>(sequences); ++i)
      if (i == 0 || rng() % 2 == 0) which.push_back(i);
    ASSERT_NO_FATAL_FAILURE(run.step(graphs, which, "step " + std::to_string(s)));
  }
  EXPECT_GT(graphs.stats().replays, 0);
  EXPECT_EQ(graphs.stats().eager, 0);
}

// Sequences that come and go through two state slots: a graph recorded for the first pair's slots
// replays for each pair that takes the slots after it (other prompts, positions and pages), with
// the eager bits, so the serving engine's decode steps need not record a graph per set of requests.
TEST_P(CudaGraphs, AGraphReplaysForTheNextSequencesInItsSlots) {
  const int64_t V = model_->config()->vocab_size, capacity = 200, steps = 20;
  const std::shared_ptr<CachePool> pool =
      model_->new_cache_pool(*ops_, CachePool::pages_for(model_->config(), 2, capacity, 2), DType::kBF16);
  const std::shared_ptr<StateSlots> slots = model_->new_state_slots(*ops_, 2, DType::kBF16);
  cuda::CudaGraphForward graphs(*ops_);
  EagerForward eager;
  for (uint32_t pair = 0; pair < 3; ++pair) {
    std::vector<std::vector<int32_t>> ids;
    std::vector<SequenceCache> in_slots, own;
    for (uint32_t i = 0; i < 2; ++i) {
      const auto prompt = static_cast<size_t>(5 + 61 * pair + 40 * i);
      ids.push_back(test_ids(static_cast<int64_t>(prompt) + steps, V, 200 + 2 * pair + i));
      in_slots.push_back(model_->new_sequence(*ops_, pool, capacity, PageNaming::kTakenFromPool, slots));
      own.push_back(model_->new_sequence(*ops_, capacity, false));
      for (SequenceCache* cache : {&in_slots.back(), &own.back()}) {
        ForwardBatch prefill;
        prefill.options.logits = LogitsFor::kNone;
        prefill.add(*cache, std::span(ids.back()).first(prompt));
        model_->forward(*ops_, prefill);
      }
    }
    for (int64_t s = 0; s < steps; ++s) {
      const auto decode = [&](ForwardRunner& runner, std::vector<SequenceCache>& caches) {
        ForwardBatch batch;
        batch.options.logits = LogitsFor::kLastTokenOfSequence;
        for (size_t i = 0; i < caches.size(); ++i)
          batch.add(caches[i], std::span(ids[i]).subspan(static_cast<size_t>(caches[i].length()), 1));
        return logits_of(*ops_, runner.forward(*model_, *ops_, batch));
      };
      const std::vector<float> want = decode(eager, own), got = decode(graphs, in_slots);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << "pair " << pair << " step " << s;
    }
  }
  EXPECT_EQ(graphs.stats().captures, 1);
  EXPECT_EQ(graphs.stats().replays, 3 * steps - 1);
  EXPECT_EQ(slots->free_slots(), 2);
}

void print_graph_stats(const char* what, const cuda::CudaGraphForward& graphs) {
  std::printf("[measured] %s: %lld captures, %lld replays, %lld eager steps\n", what,
              static_cast<long long>(graphs.stats().captures), static_cast<long long>(graphs.stats().replays),
              static_cast<long long>(graphs.stats().eager));
}

// Every token and logprob of the requests, served by an engine with `config` running its steps
// through `runner`; each wave is submitted once the one before has finished. `prefix_hits` gets
// the engine's count of tokens not computed thanks to its prefix cache.
std::vector<std::vector<GeneratedToken>> serve(const Model& model, Ops& ops, ForwardRunner& runner, EngineConfig config,
                                               const std::vector<std::vector<GenerateRequest>>& waves,
                                               uint64_t* prefix_hits = nullptr) {
  config.runner = &runner;
  Engine engine(model, ops, config);
  std::vector<RequestHandle> handles;
  for (const std::vector<GenerateRequest>& wave : waves) {
    for (const GenerateRequest& r : wave) handles.push_back(engine.submit(r));
    while (engine.step()) {
    }
  }
  if (prefix_hits != nullptr) *prefix_hits = engine.stats().prefix_cache_hits;
  std::vector<std::vector<GeneratedToken>> out;
  for (RequestHandle& h : handles) {
    out.emplace_back();
    while (!h.done()) {
      const OutputChunk c = h.next();
      EXPECT_FALSE(c.finish && *c.finish == FinishReason::kError) << c.error;
      out.back().insert(out.back().end(), c.tokens.begin(), c.tokens.end());
    }
  }
  return out;
}

// A greedy request with logprobs (the engine seeds sampled requests at random).
GenerateRequest greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.sampling.logprobs = true;
  return r;
}

// A stream of nine requests of different lengths, four at a time, prefills chunked.
std::vector<std::vector<GeneratedToken>> serve_requests(const Model& model, Ops& ops, ForwardRunner& runner) {
  EngineConfig config;
  config.max_num_seqs = 4;
  config.max_num_batched_tokens = 48;
  config.max_model_len = 256;
  std::vector<GenerateRequest> requests;
  for (uint32_t i = 0; i < 9; ++i)
    requests.push_back(greedy_request(test_ids(3 + 17 * i, model.config()->vocab_size, 90 + i), 12 + 5 * i));
  return serve(model, ops, runner, config, {requests});
}

void expect_same_tokens(const std::vector<std::vector<GeneratedToken>>& got,
                        const std::vector<std::vector<GeneratedToken>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size()) << "request " << r;
    for (size_t i = 0; i < want[r].size(); ++i) {
      EXPECT_EQ(got[r][i].id, want[r][i].id) << "request " << r << " token " << i;
      EXPECT_EQ(std::memcmp(&got[r][i].logprob, &want[r][i].logprob, sizeof(float)), 0)
          << "request " << r << " token " << i << ": logprob " << got[r][i].logprob << " vs " << want[r][i].logprob;
    }
  }
}

TEST_P(CudaGraphs, EngineServesTheEagerTokens) {
  EagerForward eager;
  cuda::CudaGraphForward graphs(*ops_);
  const std::vector<std::vector<GeneratedToken>> want = serve_requests(*model_, *ops_, eager);
  const std::vector<std::vector<GeneratedToken>> got = serve_requests(*model_, *ops_, graphs);
  expect_same_tokens(got, want);
  // Some steps were pure decode and went through graphs (the rest mixed in prefill chunks).
  EXPECT_GT(graphs.stats().replays, 0);
  print_graph_stats("engine through graphs", graphs);
}

// The engine's shared page pool (pages named by cache blocks), prefix caching and the KV canary,
// through graphs, against the default engine (a pool per sequence) eagerly: the same tokens and
// logprobs, prefix-cache hits included (requests sharing 700 tokens with an earlier one resume on
// its blocks and on the state snapshot it left at 640; docs/MODEL.md §8.6).
TEST_P(CudaGraphs, EngineWithPrefixCachingServesTheEagerTokens) {
  EagerForward eager;
  cuda::CudaGraphForward graphs(*ops_);
  EngineConfig plain;
  plain.max_num_seqs = 4;
  plain.max_num_batched_tokens = 256;
  plain.max_model_len = 1024;
  plain.block_size = 64;
  EngineConfig cached = plain;
  cached.enable_prefix_caching = true;
  cached.kv_canary = true;
  const int64_t V = model_->config()->vocab_size;
  const std::vector<int32_t> shared = test_ids(700, V, 7);
  std::vector<std::vector<GenerateRequest>> waves = {{greedy_request(shared, 6)}, {}};
  for (uint32_t i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt = shared;
    for (int32_t id : test_ids(5 + 9 * i, V, 70 + i)) prompt.push_back(id);
    waves[1].push_back(greedy_request(prompt, 8 + 3 * i));
  }
  uint64_t hits = 0;
  const std::vector<std::vector<GeneratedToken>> want = serve(*model_, *ops_, eager, plain, waves);
  const std::vector<std::vector<GeneratedToken>> got = serve(*model_, *ops_, graphs, cached, waves, &hits);
  expect_same_tokens(got, want);
  EXPECT_EQ(hits, 3u * 640);  // each resumes on the snapshot the first left at 640
  EXPECT_GT(graphs.stats().replays, 0);
}

// Three waves of ten requests through an engine of twelve sequences with the shared pool: its
// sequences hold state slots 0..n-1 and its decode steps of 9-12 sequences are padded to 12
// (decode_batch_bucket, capped at the slots), so at most nine graphs (sizes 1-8 and 12) serve
// every decode step, and the tokens and logprobs are the eager engine's (a cache per request), bit
// for bit.
TEST_P(CudaGraphs, EngineDecodeStepsReplayAGraphPerPaddedSize) {
  EagerForward eager;
  cuda::CudaGraphForward graphs(*ops_, 16);
  EngineConfig config;
  config.max_num_seqs = 12;
  config.max_num_batched_tokens = 64;
  config.max_model_len = 256;
  EngineConfig shared = config;
  shared.shared_cache_pool = true;
  shared.kv_canary = true;
  std::vector<std::vector<GenerateRequest>> waves(3);
  for (uint32_t i = 0; i < 30; ++i)
    waves[i / 10].push_back(
        greedy_request(test_ids(2 + 3 * (i % 10), model_->config()->vocab_size, 120 + i), 4 + 3 * (i % 7)));
  const std::vector<std::vector<GeneratedToken>> want = serve(*model_, *ops_, eager, config, waves);
  const std::vector<std::vector<GeneratedToken>> got = serve(*model_, *ops_, graphs, shared, waves);
  expect_same_tokens(got, want);
  EXPECT_LE(graphs.stats().captures, 9);
  EXPECT_GT(graphs.stats().replays, 3 * graphs.stats().captures);
  print_graph_stats("engine, padded decode steps", graphs);
}

// Two thousand graph replays of decode steps of every size (waves of sixteen requests of random
// lengths in an engine of sixteen sequences, each wave's decode steps shrinking from 16 to 1 as
// its requests end, those of 9-16 padded to 16): every request runs to its length, every slot
// comes back, and at most nine graphs serve all the decode steps. scripts/gpu_run.sh runs it
// under compute-sanitizer's memcheck (padding rows, slot moves and replays touching only their
// own memory); the waves keep the eager (prefill) steps, slow under the sanitizer, to a few.
TEST_P(CudaGraphs, TwoThousandPaddedReplaysOfRandomBatchSizes) {
  cuda::CudaGraphForward graphs(*ops_, 16);
  EngineConfig config;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 512;
  config.max_model_len = 256;
  config.shared_cache_pool = true;
  config.runner = &graphs;
  Engine engine(*model_, *ops_, config);
  std::mt19937 rng(11);
  std::vector<RequestHandle> handles;
  std::vector<int64_t> lengths;
  const int64_t V = model_->config()->vocab_size;
  while (graphs.stats().replays < 2000) {
    for (int i = 0; i < 16; ++i) {
      const int64_t max_tokens = 8 + static_cast<int64_t>(rng() % 200);
      handles.push_back(
          engine.submit(greedy_request(test_ids(1 + rng() % 30, V, static_cast<uint32_t>(rng())), max_tokens)));
      lengths.push_back(max_tokens);
    }
    while (engine.step()) {
    }
  }
  EXPECT_LE(graphs.stats().captures, 9);
  EXPECT_EQ(engine.stats().state_slots_used, 0);
  for (size_t i = 0; i < handles.size(); ++i) {
    int64_t tokens = 0;
    while (!handles[i].done()) {
      const OutputChunk c = handles[i].next();
      EXPECT_FALSE(c.finish && *c.finish == FinishReason::kError) << c.error;
      tokens += static_cast<int64_t>(c.tokens.size());
    }
    EXPECT_EQ(tokens, lengths[i]) << "request " << i;
  }
  print_graph_stats((std::to_string(handles.size()) + " requests of random lengths").c_str(), graphs);
}

INSTANTIATE_TEST_SUITE_P(MultiStream, CudaGraphs, ::testing::Values(MultiStreamMode::kOff, MultiStreamMode::kOn),
                         [](const ::testing::TestParamInfo<MultiStreamMode>& info) {
                           return std::string(multi_stream_mode_name(info.param));
                         });

}  // namespace
}  // namespace dsv4::testing
