// An engine of data-parallel ranks on the CPU (runtime/engine.h "Data parallelism"): two ranks,
// each a backend of its own holding half of the tiny model's routed experts, serve a mix of
// greedy and seeded requests and give each the tokens and logprobs one rank holding every expert
// gives it, bit for bit, stepping on the caller's thread or on the engine's; both ranks take
// requests, every block comes back, and each rank's thread binds its backend (Ops::bind_thread). A rank whose forward fails fails the group's steps instead
// of leaving the others waiting; ranks that do not make one group are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "cpu_forwarding_ops.h"
#include "model/forward_runner.h"
#include "model/model.h"
#include "ops/expert_comm.h"
#include "engine_test_util.h"
#include "runtime/engine.h"

namespace dsv4 {
namespace {

// Nine requests of different lengths, greedy and seeded at two temperatures.
std::vector<GenerateRequest> requests() {
  std::vector<GenerateRequest> out;
  for (uint32_t i = 0; i < 9; ++i) {
    GenerateRequest r;
    r.prompt = ids(5 + 11 * i, 40 + i);
    r.stop.max_tokens = 3 + i % 4;
    r.stop.ignore_eos = true;
    r.sampling.temperature = i % 3 == 0 ? 0.0f : i % 3 == 1 ? 0.8f : 1.3f;
    r.sampling.seed = i;
    r.sampling.logprobs = true;
    out.push_back(std::move(r));
  }
  return out;
}

EngineConfig small_config() {
  EngineConfig c;
  c.max_model_len = 256;
  c.max_num_seqs = 4;  // per rank: requests wait and take turns
  c.max_num_batched_tokens = 40;
  c.block_size = 16;
  return c;
}

class DataParallelEngine : public ::testing::Test {
 protected:
  // Rank r of `ranks`: a backend of its own, the model with its share of the experts.
  struct Rank {
    Rank(int r, int ranks) : ops(1), model(Model::load(ops, DSV4_TINY_MODEL_DIR, {}, {r, ranks})) {}
    cpu::CpuOps ops;
    Model model;
  };

  static void SetUpTestSuite() {
    whole_ops_ = std::make_unique<cpu::CpuOps>(2);
    whole_ = std::make_unique<Model>(Model::load(*whole_ops_, DSV4_TINY_MODEL_DIR));
    group_ = in_process_expert_group(2);
    for (int r = 0; r < 2; ++r) ranks_.push_back(std::make_unique<Rank>(r, 2));
  }
  static void TearDownTestSuite() {
    ranks_.clear();
    group_.clear();
    whole_.reset();
    whole_ops_.reset();
  }
  static std::vector<EngineRank> engine_ranks() {
    std::vector<EngineRank> out;
    for (size_t r = 0; r < ranks_.size(); ++r) out.push_back({&ranks_[r]->model, &ranks_[r]->ops, group_[r].get()});
    return out;
  }
  // Every request's result from an engine of one rank holding every expert.
  static std::vector<Result> one_rank(const EngineConfig& c) {
    Engine e(*whole_, *whole_ops_, c);
    std::vector<RequestHandle> handles;
    for (const GenerateRequest& r : requests()) handles.push_back(e.submit(r));
    for (int i = 0; i < 10000 && e.step(); ++i) {
    }
    std::vector<Result> out;
    for (RequestHandle& h : handles) out.push_back(drain(h));
    return out;
  }

  static std::unique_ptr<cpu::CpuOps> whole_ops_;
  static std::unique_ptr<Model> whole_;
  static std::vector<std::unique_ptr<ExpertComm>> group_;
  static std::vector<std::unique_ptr<Rank>> ranks_;
};
std::unique_ptr<cpu::CpuOps> DataParallelEngine::whole_ops_;
std::unique_ptr<Model> DataParallelEngine::whole_;
std::vector<std::unique_ptr<ExpertComm>> DataParallelEngine::group_;
std::vector<std::unique_ptr<DataParallelEngine::Rank>> DataParallelEngine::ranks_;

TEST_F(DataParallelEngine, TwoRanksGiveOneRanksTokensBitForBit) {
  for (const int variant : {0, 1, 2}) {
    const std::string what = variant == 0 ? "pool per sequence" : variant == 1 ? "prefix caching" : "exact math";
    EngineConfig c = small_config();
    c.enable_prefix_caching = variant == 1;
    c.kv_canary = variant == 1;
    c.exact_math = variant == 2;
    const std::vector<Result> want = one_rank(c);
    const std::vector<EngineRank> ranks = engine_ranks();
    Engine e(ranks, c);
    EXPECT_EQ(e.data_parallel_size(), 2);
    std::vector<RequestHandle> handles;
    for (const GenerateRequest& r : requests()) handles.push_back(e.submit(r));
    int steps = 0;
    while (steps < 10000 && e.step()) ++steps;
    int on_rank[2] = {0, 0};
    for (size_t i = 0; i < handles.size(); ++i) {
      ++on_rank[handles[i].id() % 2];  // rank r gives out ids r + 2k
      const Result got = drain(handles[i]);
      EXPECT_EQ(got.finish, FinishReason::kLength) << what << ", request " << i << ": " << got.last.error;
      EXPECT_EQ(got.tokens, want[i].tokens) << what << ", request " << i;
      EXPECT_TRUE(same_bits(got.logprobs, want[i].logprobs)) << what << ", request " << i;
    }
    EXPECT_EQ(on_rank[0], 5) << what;  // submitted at once: the ranks take turns
    EXPECT_EQ(on_rank[1], 4) << what;
    const EngineStats s = e.stats();
    EXPECT_EQ(s.requests_finished, 9u) << what;
    EXPECT_EQ(s.cache_blocks_used, 0) << what;
    EXPECT_EQ(s.state_slots_used, 0) << what;
    EXPECT_EQ(s.cache_blocks_total, 2 * e.config().num_cache_blocks) << what;
    EXPECT_EQ(s.steps, static_cast<uint64_t>(steps + 1)) << what;  // one count per step, not per rank
    EXPECT_FALSE(e.fault().has_value()) << what;
  }
}

// The engine thread steps the ranks together while threads submit, and sleeps when they are done.
TEST_F(DataParallelEngine, TheEngineThreadStepsTheRanksTogether) {
  EngineConfig c = small_config();
  c.shared_cache_pool = true;
  const std::vector<Result> want = one_rank(c);
  const std::vector<EngineRank> ranks = engine_ranks();
  Engine e(ranks, c);
  e.start();
  const std::vector<GenerateRequest> all = requests();
  std::vector<Result> got(all.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < all.size(); ++i)
    clients.emplace_back([&, i] {
      RequestHandle h = e.submit(all[i]);
      got[i] = drain(h);
    });
  for (std::thread& t : clients) t.join();
  e.stop();
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_TRUE(same_bits(got[i].logprobs, want[i].logprobs)) << "request " << i;
  }
  EXPECT_EQ(e.stats().cache_blocks_used, 0);
}

// The CPU backend whose sparse attention fails once armed: a forward that fails before its first
// MoE exchange, while the other rank waits in it.
class FailingAttentionOps final : public testing::CpuForwardingOps {
 public:
  std::string_view name() const override { return "cpu-failing-attention"; }
  void sparse_attention(const SparseAttentionParams& p) override {
    if (armed) throw Error("sparse attention broke");
    cpu_.sparse_attention(p);
  }
  bool armed = false;
};

// Rank 1's forward fails: it gives the group up, so rank 0's step fails with it rather than wait
// in the exchange forever, and the engine has a fault that says why and refuses requests.
TEST_F(DataParallelEngine, ARankWhoseForwardFailsFailsTheGroupInsteadOfHanging) {
  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
  FailingAttentionOps failing;
  const Model share1 = Model::load(failing, DSV4_TINY_MODEL_DIR, {}, {1, 2});
  const std::vector<EngineRank> ranks = {{&ranks_[0]->model, &ranks_[0]->ops, group[0].get()},
                                         {&share1, &failing, group[1].get()}};
  Engine e(ranks, small_config());
  std::vector<RequestHandle> handles;
  for (const GenerateRequest& r : requests()) handles.push_back(e.submit(r));
  e.step();  // both ranks prefill
  failing.armed = true;
  for (int i = 0; i < 100 && e.step(); ++i) {
  }
  for (RequestHandle& h : handles) {
    const Result r = drain(h);
    EXPECT_EQ(r.finish, FinishReason::kError);
    EXPECT_NE(r.last.error.find(h.id() % 2 == 1 ? "sparse attention broke" : "rank 1's forward failed"), std::string::npos)
        << r.last.error;
  }
  // The engine can serve no more, and says why.
  const std::optional<std::string> fault = e.fault();
  ASSERT_TRUE(fault.has_value());
  EXPECT_NE(fault->find("sparse attention broke"), std::string::npos) << *fault;
  try {
    e.submit(requests()[0]);
    ADD_FAILURE() << "a broken engine took a request";
  } catch (const CommError& error) {
    EXPECT_NE(std::string(error.what()).find("the engine cannot serve"), std::string::npos) << error.what();
  }
  EXPECT_EQ(e.stats().cache_blocks_used, 0);
}

// The CPU backend that remembers which threads bound it (Ops::bind_thread) and counts the ops run
// on a thread that did not.
class BindingOps final : public testing::CpuForwardingOps {
 public:
  std::string_view name() const override { return "cpu-binding"; }
  void bind_thread() override {
    std::lock_guard lock(mutex_);
    bound_.insert(std::this_thread::get_id());
  }
  void embed(const EmbedParams& p) override {
    {
      std::lock_guard lock(mutex_);
      if (!bound_.contains(std::this_thread::get_id())) ++unbound_ops;
      ++ops;
    }
    cpu_.embed(p);
  }
  int ops = 0;
  int unbound_ops = 0;

 private:
  std::mutex mutex_;
  std::set<std::thread::id> bound_;
};

// A backend bound to one device of several must be used from threads that made it current: each
// rank's thread binds its backend before the rank's state is made, and keeps it for every step.
TEST_F(DataParallelEngine, EveryRankThreadBindsItsBackend) {
  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
  BindingOps backends[2];
  std::vector<Model> models;
  for (int r = 0; r < 2; ++r) models.push_back(Model::load(backends[r], DSV4_TINY_MODEL_DIR, {}, {r, 2}));
  const std::vector<EngineRank> ranks = {{&models[0], &backends[0], group[0].get()},
                                         {&models[1], &backends[1], group[1].get()}};
  Engine e(ranks, small_config());
  std::vector<RequestHandle> handles;
  for (const GenerateRequest& r : requests()) handles.push_back(e.submit(r));
  for (int i = 0; i < 10000 && e.step(); ++i) {
  }
  for (RequestHandle& h : handles) EXPECT_EQ(drain(h).finish, FinishReason::kLength);
  for (const BindingOps& b : backends) {
    EXPECT_GT(b.ops, 0);
    EXPECT_EQ(b.unbound_ops, 0);
  }
}

class NoRunner final : public ForwardRunner {
 public:
  ForwardResult forward(const Model& model, Ops& ops, const ForwardBatch& batch) override {
    return model.forward(ops, batch);
  }
};

TEST_F(DataParallelEngine, RanksThatDoNotMakeOneGroupAreRefused) {
  const auto refused = [](std::span<const EngineRank> ranks, const EngineConfig& c, const std::string& words) {
    try {
      Engine e(ranks, c);
      ADD_FAILURE() << "accepted; expected a refusal naming " << words;
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
  };
  std::vector<EngineRank> swapped = engine_ranks();
  std::swap(swapped[0].expert_group, swapped[1].expert_group);
  refused(swapped, small_config(), "rank 0 of 2 needs rank 0 of an expert group of 2, not rank 1 of 2");
  std::vector<EngineRank> no_group = engine_ranks();
  no_group[1].expert_group = nullptr;
  refused(no_group, small_config(), "rank 1 of 2 needs rank 1 of an expert group of 2, not none");
  refused({}, small_config(), "no rank");
  NoRunner runner;
  EngineConfig with_runner = small_config();
  with_runner.runner = &runner;
  refused(engine_ranks(), with_runner, "without a ForwardRunner");
  // A rank holding a share runs only with its group: an engine of it alone fails its requests.
  Engine alone(ranks_[0]->model, ranks_[0]->ops, small_config());
  RequestHandle h = alone.submit(requests()[0]);
  for (int i = 0; i < 100 && alone.step(); ++i) {
  }
  const Result r = drain(h);
  EXPECT_EQ(r.finish, FinishReason::kError);
  EXPECT_NE(r.last.error.find("need an expert group"), std::string::npos) << r.last.error;
}

}  // namespace
}  // namespace dsv4
