// The engine on the tiny checkpoint and the CPU reference: a request's output in a busy batch
// (chunked prefill, preemptions) equals its output alone bit for bit, greedy and seeded, and a
// prefix-cache hit gives a miss's output bit for bit; cancel
// and preemption give every cache block back; a long prompt among a stream of short ones
// finishes; too-long requests are refused; stop ids, stop strings and max_tokens end streams;
// JSON object requests write one JSON object (or a prefix of one), sampled or greedy; the engine
// thread serves several submitting threads; allowed_token_ids restricts every draw, alone and beside a
// choice constraint; bad_words_ids keeps its sequences out of greedy and sampled outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "model/cache.h"
#include "model/cache_pool.h"
#include "model/forward_runner.h"
#include "model/model.h"
#include "cpu_forwarding_ops.h"
#include "engine_test_util.h"
#include "runtime/engine.h"
#include "runtime/stats_log.h"
#include "sampling/regex_nfa.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

GenerateRequest request(std::vector<int32_t> prompt, int64_t max_tokens, float temperature = 0.0f) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.logprobs = true;
  return r;
}

// Twelve requests of up to max_tokens, greedy and sampled (temperatures 0, 0.7 and 1.5, seeds 0-3,
// prompt ids(9, 3 + seed)), each given its output constraint by `constrain`, submitted to `e`.
template <typename Constrain>
std::vector<RequestHandle> submit_sampled_grid(Engine& e, int64_t max_tokens, Constrain&& constrain) {
  std::vector<RequestHandle> handles;
  for (float temperature : {0.0f, 0.7f, 1.5f})
    for (uint64_t seed = 0; seed < 4; ++seed) {
      GenerateRequest r = request(ids(9, 3 + static_cast<int>(seed)), max_tokens, temperature);
      r.sampling.seed = seed;
      constrain(r);
      handles.push_back(e.submit(r));
    }
  return handles;
}

// `e` refuses r with a UsageError whose message contains `words`.
void expect_refused(Engine& e, const GenerateRequest& r, const std::string& words) {
  try {
    e.submit(r);
    ADD_FAILURE() << "accepted; expected a refusal naming " << words;
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ops_ = std::make_unique<cpu::CpuOps>(2);
    model_ = std::make_unique<Model>(Model::load(*ops_, DSV4_TINY_MODEL_DIR));
  }
  static void TearDownTestSuite() {
    model_.reset();
    ops_.reset();
  }
  static EngineConfig small_config() {
    EngineConfig c;
    c.max_model_len = 512;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 48;
    c.block_size = 16;
    return c;
  }
  // Room for prompts long enough to hit the prefix cache (multiples of 128 on the tiny model).
  static EngineConfig long_prompt_config() {
    EngineConfig c = small_config();
    c.max_model_len = 1024;
    c.max_num_batched_tokens = 256;
    c.block_size = 64;
    return c;
  }
  std::unique_ptr<Engine> engine(EngineConfig c = small_config(), std::shared_ptr<const Tokenizer> tok = nullptr) {
    return std::make_unique<Engine>(*model_, *ops_, c, std::move(tok));
  }
  static void run_until_idle(Engine& e) {
    for (int i = 0; i < 10000 && e.step(); ++i) {
    }
  }
  // Runs `r` alone on `e` (which holds cached prefixes) and checks that it gives the tokens and
  // logprobs of `miss` bit for bit with `cached` of its prompt tokens not computed.
  static void expect_hit_gives_the_miss(Engine& e, const GenerateRequest& r, const Result& miss, int64_t cached) {
    RequestHandle h = e.submit(r);
    run_until_idle(e);
    const Result got = drain(h);
    EXPECT_EQ(got.tokens, miss.tokens);
    EXPECT_TRUE(same_bits(got.logprobs, miss.logprobs));
    EXPECT_EQ(got.last.metrics->cached_tokens, cached);
  }
  Result alone(const GenerateRequest& r) {
    auto e = engine();
    RequestHandle h = e->submit(r);
    run_until_idle(*e);
    return drain(h);
  }
  // The sampling-parameter tests' baseline: six greedy tokens after prompt ids(12, 81), without
  // logprobs (so a plain request draws on the backend), and that output alone.
  struct GreedyBaseline {
    std::vector<int32_t> prompt = ids(12, 81);
    GenerateRequest plain;
    Result free;
  };
  GreedyBaseline greedy_baseline() {
    GreedyBaseline b;
    b.plain = request(b.prompt, 6);
    b.plain.sampling.logprobs = false;
    b.free = alone(b.plain);
    return b;
  }

  static std::unique_ptr<cpu::CpuOps> ops_;
  static std::unique_ptr<Model> model_;
};
std::unique_ptr<cpu::CpuOps> EngineTest::ops_;
std::unique_ptr<Model> EngineTest::model_;

// The request under test among others of different lengths, submitted before it while they run,
// in an engine whose budget chunks the prefills. It comes last, so in a cache small enough to
// preempt it is the first to be preempted and recomputed.
Result in_busy_batch(Engine& e, const GenerateRequest& r, uint64_t& preemptions) {
  std::vector<RequestHandle> others;
  others.push_back(e.submit(request(ids(70, 11), 6)));
  others.push_back(e.submit(request(ids(5, 12), 12, 0.9f)));
  e.step();
  others.push_back(e.submit(request(ids(33, 13), 9)));
  e.step();
  others.push_back(e.submit(request(ids(90, 14), 4)));
  RequestHandle h = e.submit(r);
  for (int i = 0; i < 10000 && e.step(); ++i) {
  }
  for (RequestHandle& o : others) EXPECT_EQ(drain(o).finish, FinishReason::kLength);
  preemptions = e.stats().preemptions;
  EXPECT_EQ(e.stats().cache_blocks_used, 0);
  EXPECT_EQ(e.stats().state_slots_used, 0);
  return drain(h);
}

TEST_F(EngineTest, GreedyOutputInABusyBatchEqualsItsOutputAloneBitForBit) {
  const GenerateRequest r = request(ids(41, 1), 10);
  const Result ref = alone(r);
  ASSERT_EQ(ref.tokens.size(), 10u);
  EXPECT_EQ(ref.finish, FinishReason::kLength);
  // The default number of blocks, then one that forces preemptions; each with a cache pool per
  // sequence (the reference's), with one pool the sequences share (and a long-prefill threshold),
  // and with prefix caching over it (a preempted request finds its own blocks when it comes back).
  for (const int pool : {0, 1, 2})
    for (int64_t blocks : {0, 12}) {
      const std::string what = std::to_string(blocks) + " blocks, " +
                               (pool == 0 ? "pool per sequence" : pool == 1 ? "shared pool" : "prefix caching");
      EngineConfig c = small_config();
      c.num_cache_blocks = blocks;
      c.shared_cache_pool = pool == 1;
      c.enable_prefix_caching = pool == 2;
      c.long_prefill_token_threshold = pool == 1 ? 7 : 0;  // prompts in chunks of 7 at most
      c.kv_canary = true;  // blocks come poisoned: an unwritten row read would show
      auto e = engine(c);
      uint64_t preemptions = 0;
      const Result got = in_busy_batch(*e, r, preemptions);
      EXPECT_EQ(got.tokens, ref.tokens) << what;
      EXPECT_TRUE(same_bits(got.logprobs, ref.logprobs)) << what;
      if (blocks > 0) {
        EXPECT_GT(preemptions, 0u) << what << ": the small pool was meant to preempt";
        EXPECT_GT(got.last.metrics->preemptions, 0) << what << ": the request under test was meant to be recomputed";
      }
      EXPECT_EQ(e->stats().cache_blocks_cached > 0, pool == 2) << what;
    }
}

// Prefix caching on the tiny model (4 layers, W = 128: hits in multiples of 128): requests that
// share a prefix with an earlier one give the tokens and logprobs they give without the cache, bit
// for bit, while computing less: b shares 680 tokens of a's 900, so it finds 640 of them cached and
// resumes 508 tokens before that (recomputing its window and compressor state); c shares all 900,
// so it resumes at 896 on the state snapshot a left there; a copy of a among another copy still
// running shares their blocks. These are the cases of the cross-request window bug of ROCm/ATOM
// #1417: a request reusing another's entries must not read that request's window ring, nor an
// empty one.
TEST_F(EngineTest, PrefixCacheHitsGiveTheTokensOfAMissBitForBit) {
  EngineConfig c = long_prompt_config();
  const std::vector<int32_t> first = ids(900, 21);
  const auto sharing = [&first](size_t shared, int64_t own, uint32_t seed) {
    std::vector<int32_t> prompt(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(shared));
    for (int32_t id : ids(own, seed)) prompt.push_back(id);
    return prompt;
  };
  const GenerateRequest a = request(first, 4), b = request(sharing(680, 30, 22), 5), d = request(sharing(900, 20, 23), 5);

  auto plain = engine(c);
  RequestHandle a_miss = plain->submit(a), b_miss = plain->submit(b), d_miss = plain->submit(d);
  run_until_idle(*plain);
  const Result want_a = drain(a_miss), want_b = drain(b_miss), want_d = drain(d_miss);
  EXPECT_EQ(plain->stats().prefix_cache_hits, 0u);
  EXPECT_EQ(plain->stats().cache_blocks_cached, 0);

  c.enable_prefix_caching = true;
  c.kv_canary = true;
  auto cached = engine(c);
  RequestHandle a_first = cached->submit(a);
  run_until_idle(*cached);
  EXPECT_EQ(cached->stats().prefix_snapshots, 1);  // at 896
  const uint64_t computed_a = cached->stats().computed_tokens;
  const uint64_t prompt_computed_a = cached->stats().prompt_tokens_computed;
  EXPECT_EQ(prompt_computed_a, 900u);
  RequestHandle b_hit = cached->submit(b);
  run_until_idle(*cached);
  const Result got_a = drain(a_first), got_b = drain(b_hit);
  EXPECT_EQ(got_a.tokens, want_a.tokens);
  EXPECT_EQ(got_b.tokens, want_b.tokens);
  EXPECT_TRUE(same_bits(got_b.logprobs, want_b.logprobs));
  EXPECT_EQ(got_b.last.metrics->cached_tokens, 640 - 508);
  EXPECT_EQ(cached->stats().computed_tokens - computed_a, 710u - 132u + 4u);
  EXPECT_EQ(cached->stats().prompt_tokens_computed - prompt_computed_a, 710u - 132u);  // the decode steps' are not

  expect_hit_gives_the_miss(*cached, d, want_d, 896);
  EXPECT_EQ(cached->stats().prefix_cache_hits, 132u + 896u);

  // a again, twice: the second while the first is still running; both resume on the snapshot and
  // share the first a's blocks.
  RequestHandle running = cached->submit(a);
  cached->step();
  RequestHandle again = cached->submit(a);
  run_until_idle(*cached);
  const Result got_running = drain(running), got_again = drain(again);
  EXPECT_EQ(got_again.tokens, want_a.tokens);
  EXPECT_TRUE(same_bits(got_again.logprobs, want_a.logprobs));
  EXPECT_TRUE(same_bits(got_running.logprobs, want_a.logprobs));
  EXPECT_EQ(got_running.last.metrics->cached_tokens, 896);
  EXPECT_EQ(got_again.last.metrics->cached_tokens, 896);
  EXPECT_EQ(cached->stats().cache_blocks_used, 0);
  EXPECT_GT(cached->stats().cache_blocks_cached, 0);
}

// With a snapshot interval (256) a's prefill leaves snapshots at 256, 512 and 768 as well as 896,
// so b, sharing 680 tokens, resumes on the one at 512 instead of recomputing 508 tokens before 640
// (132 skipped), with the tokens and logprobs of a miss bit for bit.
TEST_F(EngineTest, ASnapshotIntervalLetsAShorterSharedStartResumeOnASnapshot) {
  EngineConfig c = long_prompt_config();
  const std::vector<int32_t> first = ids(900, 21);
  std::vector<int32_t> shared(first.begin(), first.begin() + 680);
  for (int32_t id : ids(30, 22)) shared.push_back(id);
  const GenerateRequest a = request(first, 4), b = request(shared, 5);
  auto plain = engine(c);
  RequestHandle b_miss = plain->submit(b);
  run_until_idle(*plain);
  const Result want_b = drain(b_miss);

  c.enable_prefix_caching = true;
  c.prefix_snapshot_interval = 256;
  c.kv_canary = true;
  auto cached = engine(c);
  RequestHandle a_first = cached->submit(a);
  run_until_idle(*cached);
  EXPECT_EQ(cached->stats().prefix_snapshots, 4);  // at 256, 512, 768 and 896
  drain(a_first);
  expect_hit_gives_the_miss(*cached, b, want_b, 512);

  c.prefix_snapshot_interval = 200;  // not a multiple of 128
  EXPECT_THROW(engine(c), UsageError);
  c.prefix_snapshot_interval = 256;
  c.enable_prefix_caching = false;  // an interval without prefix caching is refused, not ignored
  EXPECT_THROW(engine(c), UsageError);
}

// Draws on the backend (Ops::edit_logits for logit_bias, penalties and bans, Ops::mask_logits for
// output constraints, min_tokens and allowed_token_ids, Ops::sample_rows, Ops::row_logprobs; only
// ids and logprobs downloaded) give the tokens, logprobs, ranks and top logprobs of the host's
// sample_token (EngineConfig::sample_on_backend off) bit for bit, for greedy and seeded
// top-k/top-p/min-p requests, with penalties and logit_bias, bad_words, min_tokens holding back
// stop tokens, allowed_token_ids, and JSON, choice and regex output formats, alone and in a busy
// batch.
TEST_F(EngineTest, DrawsOnTheBackendAreTheHostSamplersTokens) {
  struct Variant {
    const char* name;
    float temperature;
    std::function<void(GenerateRequest&)> change;
  };
  const std::vector<Variant> variants = {
      {"greedy", 0.0f, [](GenerateRequest&) {}},
      {"top-k, top-p, min-p", 0.9f,
       [](GenerateRequest& r) {
         r.sampling.top_k = 40;
         r.sampling.top_p = 0.9f;
         r.sampling.min_p = 0.01f;
       }},
      {"penalties and logit_bias", 0.8f,
       [](GenerateRequest& r) {
         r.sampling.presence_penalty = 0.7f;
         r.sampling.frequency_penalty = 0.4f;
         r.sampling.repetition_penalty = 1.3f;
         r.sampling.logit_bias = {{5, 2.5f}, {7, -1.0f}};
       }},
      {"greedy with penalties", 0.0f,
       [](GenerateRequest& r) {
         r.sampling.repetition_penalty = 1.5f;
         r.sampling.frequency_penalty = 1.0f;
       }},
      {"bad_words", 1.0f, [](GenerateRequest& r) { r.sampling.bad_words_ids = {{3}, {4, 6}}; }},
      {"min_tokens", 1.0f,
       [](GenerateRequest& r) {
         r.stop.min_tokens = 6;
         r.stop.stop_token_ids = {2, 9};
       }},
      {"allowed_token_ids", 1.2f,
       [](GenerateRequest& r) {
         for (int32_t id = 0; id < 3000; id += 7) r.sampling.allowed_token_ids.push_back(id);
       }},
      {"json_object", 0.7f, [](GenerateRequest& r) { r.format = OutputFormat::kJsonObject; }},
      {"choice", 1.0f,
       [](GenerateRequest& r) {
         r.format = OutputFormat::kChoice;
         r.choices = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"yes", "no", "maybe"});
       }},
  };
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  EngineConfig on_host = small_config();
  on_host.sample_on_backend = false;
  auto run_alone = [&](const GenerateRequest& r, const EngineConfig& c) {
    auto e = engine(c, tokenizer);
    RequestHandle h = e->submit(r);
    run_until_idle(*e);
    return drain(h);
  };
  for (const Variant& v : variants) {
    GenerateRequest r = request(ids(41, 1), 10, v.temperature);
    r.sampling.seed = 77;
    r.sampling.top_logprobs = 3;
    v.change(r);
    const Result got = run_alone(r, small_config()), want = run_alone(r, on_host);
    ASSERT_FALSE(got.tokens.empty()) << v.name;
    EXPECT_EQ(got.tokens, want.tokens) << v.name;
    EXPECT_EQ(got.text, want.text) << v.name;
    EXPECT_TRUE(same_bits(got.logprobs, want.logprobs)) << v.name;
    EXPECT_EQ(got.ranks, want.ranks) << v.name;
    EXPECT_EQ(got.top_ids, want.top_ids) << v.name;
    EXPECT_TRUE(same_bits(got.top_logprobs, want.top_logprobs)) << v.name;
    EXPECT_EQ(got.top_ids.size(), 3 * got.tokens.size()) << v.name;
    auto e = engine(small_config(), tokenizer);
    uint64_t preemptions = 0;
    const Result busy = in_busy_batch(*e, r, preemptions);
    EXPECT_EQ(busy.tokens, want.tokens) << v.name;
    EXPECT_TRUE(same_bits(busy.logprobs, want.logprobs)) << v.name;
    r.sampling.logprobs = false;  // the draw alone
    r.sampling.top_logprobs = 0;
    EXPECT_EQ(run_alone(r, small_config()).tokens, want.tokens) << v.name;
  }
}

// Counts the rows of vocabulary-wide logits the engine downloads.
class LogitDownloadCountingOps final : public testing::CpuForwardingOps {
 public:
  explicit LogitDownloadCountingOps(int64_t vocab) : vocab_(vocab) {}
  std::string_view name() const override { return "cpu-counting-logit-downloads"; }
  void download(ConstTensorView src, TensorView host) override {
    if (src.dtype() == DType::kF32 && src.rank() == 2 && src.dim(1) == vocab_) logit_rows += src.dim(0);
    CpuForwardingOps::download(src, host);
  }
  int64_t logit_rows = 0;

 private:
  int64_t vocab_;
};

// Draws on the backend bring no row of logits to the host, whatever the request asks (logprobs, a
// mask, penalties); with EngineConfig::sample_on_backend off, every draw brings its row: one per
// token. The same tokens either way.
TEST_F(EngineTest, DrawsOnTheBackendDownloadNoRowOfLogits) {
  std::vector<GenerateRequest> requests;
  for (uint32_t i = 0; i < 4; ++i) {
    GenerateRequest r = request(ids(20 + 5 * i, 4 + i), 8, i == 0 ? 0.0f : 0.8f);
    r.sampling.logprobs = i % 2 == 0;
    r.sampling.seed = 50 + i;
    r.sampling.top_p = 0.9f;
    if (i == 3) r.sampling.allowed_token_ids = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89};
    if (i == 2) r.sampling.repetition_penalty = 1.2f;
    requests.push_back(r);
  }
  std::vector<std::vector<int32_t>> tokens[2];
  int64_t rows[2] = {0, 0};
  for (const bool on_backend : {true, false}) {
    LogitDownloadCountingOps counting(model_->config()->vocab_size);
    EngineConfig c = small_config();
    c.sample_on_backend = on_backend;
    Engine e(*model_, counting, c);
    std::vector<RequestHandle> hs;
    for (const GenerateRequest& r : requests) hs.push_back(e.submit(r));
    run_until_idle(e);
    for (RequestHandle& h : hs) tokens[on_backend].push_back(drain(h).tokens);
    rows[on_backend] = counting.logit_rows;
  }
  EXPECT_EQ(rows[1], 0);
  EXPECT_EQ(rows[0], 4 * 8);
  EXPECT_EQ(tokens[1], tokens[0]);
}

// A step's draws run on the engine's sampling threads: one thread or four, every request of a
// mixed batch (seeded sampling with penalties and top-p/top-k, greedy with logprobs) gets the same
// tokens and logprobs.
TEST_F(EngineTest, TheSamplingThreadCountChangesNoToken) {
  const auto run = [&](int threads) {
    EngineConfig c = small_config();
    c.sampling_threads = threads;
    auto e = engine(c);
    std::vector<RequestHandle> hs;
    for (uint32_t i = 0; i < 6; ++i) {
      GenerateRequest r = request(ids(9 + 7 * i, 40 + i), 8, i % 2 == 0 ? 0.8f : 0.0f);
      r.sampling.seed = 1000 + i;
      if (i % 2 == 0) {
        r.sampling.top_p = 0.9f;
        r.sampling.top_k = 50;
        r.sampling.presence_penalty = 0.5f;
        r.sampling.repetition_penalty = 1.1f;
      }
      hs.push_back(e->submit(std::move(r)));
    }
    run_until_idle(*e);
    std::vector<Result> out;
    for (RequestHandle& h : hs) out.push_back(drain(h));
    return out;
  };
  const std::vector<Result> one = run(1), four = run(4);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].tokens.size(), 8u) << "request " << i;
    EXPECT_EQ(four[i].tokens, one[i].tokens) << "request " << i;
    EXPECT_TRUE(same_bits(four[i].logprobs, one[i].logprobs)) << "request " << i;
  }
}

TEST_F(EngineTest, ASeededSampledRequestDrawsTheSameTokensAloneAndInABatch) {
  GenerateRequest r = request(ids(45, 2), 12, 1.0f);
  r.sampling.seed = 1234;
  r.sampling.top_p = 0.95f;
  const Result ref = alone(r);
  EngineConfig c = small_config();
  c.num_cache_blocks = 12;
  auto e = engine(c);
  uint64_t preemptions = 0;
  const Result got = in_busy_batch(*e, r, preemptions);
  EXPECT_EQ(got.tokens, ref.tokens);
  EXPECT_GT(got.last.metrics->preemptions, 0) << "the request under test was meant to be recomputed";
  r.sampling.seed = 4321;
  EXPECT_NE(alone(r).tokens, ref.tokens) << "another seed should draw other tokens";
}

TEST_F(EngineTest, CancelledAndDroppedRequestsLeaveNoBlockBehind) {
  EngineConfig config = small_config();
  config.enable_prefix_caching = true;  // cached blocks come back too (still findable)
  auto e = engine(config);
  const int64_t total = e->stats().cache_blocks_total;
  RequestHandle a = e->submit(request(ids(60, 3), 50));
  RequestHandle b = e->submit(request(ids(20, 4), 50));
  std::optional<RequestHandle> c = e->submit(request(ids(10, 5), 50));
  for (int i = 0; i < 4; ++i) e->step();
  EXPECT_GT(e->stats().cache_blocks_used, 0);
  a.cancel();
  c.reset();  // a client that went away
  e->step();
  EXPECT_EQ(e->stats().running, 1);
  const Result ra = drain(a);
  EXPECT_EQ(ra.finish, FinishReason::kCancelled);
  EXPECT_EQ(ra.last.metrics->completion_tokens, static_cast<int64_t>(ra.tokens.size()));
  b.cancel();
  e->step();
  EXPECT_EQ(drain(b).finish, FinishReason::kCancelled);
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
  EXPECT_EQ(e->stats().cache_blocks_total, total);
  EXPECT_GT(e->stats().cache_blocks_cached, 0);
  EXPECT_EQ(e->stats().requests_cancelled, 3u);
  EXPECT_FALSE(e->step());
  EXPECT_THROW(b.next(), UsageError);
}

// Runs eagerly and records the graph keys of the decode steps (every sequence one token), which
// is what cuda::CudaGraphForward records a graph for; `records` says it records them, so that the
// engine pads its decode steps as for that runner.
class DecodeKeyRecorder final : public ForwardRunner {
 public:
  explicit DecodeKeyRecorder(bool records) : records_(records) {}
  ForwardResult forward(const Model& model, Ops& ops, const ForwardBatch& batch) override {
    if (batch.one_token_each()) {
      std::vector<SequenceCache::GraphKey> key;
      for (const SequenceChunk& c : batch.sequences) key.push_back(c.cache->graph_key());
      keys.push_back(std::move(key));
      // The engine's padding: a token at position 0 (the requests' prompts have two or more).
      padded_steps += std::any_of(batch.sequences.begin(), batch.sequences.end(),
                                  [](const SequenceChunk& c) { return c.cache->length() == 0; });
    }
    return model.forward(ops, batch);
  }
  bool records_decode_steps() const override { return records_; }
  size_t distinct_keys() const {
    size_t distinct = 0;
    for (auto it = keys.begin(); it != keys.end(); ++it) distinct += std::find(keys.begin(), it, *it) == it ? 1 : 0;
    return distinct;
  }
  std::vector<std::vector<SequenceCache::GraphKey>> keys;
  int64_t padded_steps = 0;

 private:
  bool records_;
};

TEST(DecodeBatchBucket, IsTheSizeUpToEightThenTheNextMultipleOfEight) {
  for (int64_t n = 1; n <= 8; ++n) EXPECT_EQ(decode_batch_bucket(n), n);
  EXPECT_EQ(decode_batch_bucket(9), 16);
  EXPECT_EQ(decode_batch_bucket(16), 16);
  EXPECT_EQ(decode_batch_bucket(57), 64);
  EXPECT_EQ(decode_batch_bucket(65), 72);
}

// Waves of ten requests through an engine of twelve sequences. With a cache per request, a set
// of requests seen once is a decode key seen once. With the shared pool the running sequences hold
// slots 0..n-1 (a departure moves the last slot's state into the freed one) and a runner that
// records decode steps gets those of 9-12 sequences padded to 12 (decode_batch_bucket, capped at
// the slots): keys of slots 0..size-1, sizes 1-8 and 12, however many waves pass; and every
// request's tokens and logprobs are those of the plain engine, bit for bit.
TEST_F(EngineTest, PaddedDecodeStepsOfRequestsComingAndGoingKeyOnTheirSizeAlone) {
  std::vector<GenerateRequest> requests;
  for (uint32_t i = 0; i < 30; ++i) requests.push_back(request(ids(2 + 3 * (i % 10), 120 + i), 4 + 3 * (i % 7)));
  const auto serve = [&](bool shared, DecodeKeyRecorder& recorder) {
    EngineConfig c = small_config();
    c.max_num_seqs = 12;
    c.max_num_batched_tokens = 64;
    c.shared_cache_pool = shared;
    c.kv_canary = true;
    c.runner = &recorder;
    auto e = engine(c);
    std::vector<RequestHandle> handles;
    for (size_t wave = 0; wave < requests.size(); wave += 10) {  // each wave drains from 10 to 1
      for (size_t i = wave; i < wave + 10; ++i) handles.push_back(e->submit(requests[i]));
      run_until_idle(*e);
    }
    std::vector<Result> out;
    for (RequestHandle& h : handles) out.push_back(drain(h));
    EXPECT_EQ(e->stats().state_slots_used, 0);
    return out;
  };
  DecodeKeyRecorder own(false), padded(true);
  const std::vector<Result> want = serve(false, own), got = serve(true, padded);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].finish, FinishReason::kLength) << "request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_TRUE(same_bits(got[i].logprobs, want[i].logprobs)) << "request " << i;
  }
  std::printf("[measured] %zu decode steps (%lld padded): %zu keys with a cache per request, %zu padded in slots\n",
              padded.keys.size(), static_cast<long long>(padded.padded_steps), own.distinct_keys(),
              padded.distinct_keys());
  EXPECT_GT(own.distinct_keys(), 12u) << "requests with caches of their own were meant to make many keys";
  EXPECT_LE(padded.distinct_keys(), 9u);
  EXPECT_GT(padded.padded_steps, 0) << "steps of 9 sequences were meant to be padded";
  for (const auto& key : padded.keys) {
    EXPECT_TRUE(key.size() <= 8 || key.size() == 12) << key.size() << " sequences";
    for (size_t i = 0; i < key.size(); ++i) EXPECT_EQ(key[i].slot, static_cast<int32_t>(i));
  }
}

TEST_F(EngineTest, ALongPromptAmongAStreamOfShortOnesFinishes) {
  EngineConfig c = small_config();
  c.max_num_batched_tokens = 16;
  c.num_cache_blocks = 20;
  auto e = engine(c);
  RequestHandle long_request = e->submit(request(ids(300, 6), 3));
  std::vector<RequestHandle> short_requests;
  for (int i = 0; i < 40; ++i) {
    if (i % 2 == 0) short_requests.push_back(e->submit(request(ids(1 + i % 7, 100 + static_cast<uint32_t>(i)), 2)));
    e->step();
  }
  run_until_idle(*e);
  EXPECT_EQ(drain(long_request).finish, FinishReason::kLength);
  for (RequestHandle& h : short_requests) EXPECT_EQ(drain(h).tokens.size(), 2u);
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
}

// A next chat turn repeats the previous answer after its prompt: the answer's decode passed 384
// (a multiple of 128), so the engine kept its state there, and the next request resumes at 384
// rather than at the prompt's snapshot (256), with the tokens of a miss.
TEST_F(EngineTest, ANextTurnResumesOnTheStateItsAnswerLeft) {
  EngineConfig c = long_prompt_config();
  const GenerateRequest first = request(ids(370, 51), 20);
  c.enable_prefix_caching = true;
  auto cached = engine(c);
  RequestHandle a = cached->submit(first);
  run_until_idle(*cached);
  const Result answer = drain(a);
  ASSERT_EQ(answer.tokens.size(), 20u);
  EXPECT_EQ(cached->stats().prefix_snapshots, 2);  // the prompt's at 256, the answer's at 384

  std::vector<int32_t> next = first.prompt;
  next.insert(next.end(), answer.tokens.begin(), answer.tokens.end());
  for (int32_t id : ids(10, 52)) next.push_back(id);
  const GenerateRequest turn = request(next, 5);
  RequestHandle b = cached->submit(turn);
  run_until_idle(*cached);
  const Result got = drain(b);
  EXPECT_EQ(got.last.metrics->cached_tokens, 384);

  c.enable_prefix_caching = false;
  auto plain = engine(c);
  RequestHandle b_miss = plain->submit(turn);
  run_until_idle(*plain);
  const Result want = drain(b_miss);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_TRUE(same_bits(got.logprobs, want.logprobs));
}

// Prefix caching under churn: requests on two long shared prefixes and short unrelated ones,
// submitted between steps, two cancelled midway, in a cache too small for them all (preemptions,
// evictions of free cached blocks, readmissions that hit their own blocks), with the KV canary on.
// Every request that finishes gives its solo tokens and logprobs bit for bit, hits happen, and
// every block comes back.
TEST_F(EngineTest, PrefixCachingUnderChurnKeepsEveryRequestsSoloBits) {
  EngineConfig c = long_prompt_config();
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 200;
  c.num_cache_blocks = 20;
  const std::vector<int32_t> first = ids(660, 31), second = ids(700, 32);
  std::vector<GenerateRequest> requests;
  for (uint32_t i = 0; i < 9; ++i) {
    std::vector<int32_t> prompt = i % 3 == 2 ? std::vector<int32_t>{} : (i % 3 == 0 ? first : second);
    for (int32_t id : ids(3 + 11 * i, 40 + i)) prompt.push_back(id);
    requests.push_back(request(prompt, 3 + i % 4));
  }
  const std::vector<size_t> cancelled = {4, 7};
  const EngineConfig plain = c;

  c.enable_prefix_caching = true;
  c.kv_canary = true;
  auto e = engine(c);
  std::vector<RequestHandle> handles;
  for (size_t i = 0; i < requests.size(); ++i) {
    handles.push_back(e->submit(requests[i]));
    e->step();
    if (std::find(cancelled.begin(), cancelled.end(), i) != cancelled.end()) handles[i].cancel();  // mid-prefill
  }
  run_until_idle(*e);
  EXPECT_GT(e->stats().prefix_cache_hits, 0u);
  EXPECT_GT(e->stats().preemptions, 0u) << "the small cache was meant to preempt";
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Result got = drain(handles[i]);
    if (std::find(cancelled.begin(), cancelled.end(), i) != cancelled.end()) {
      EXPECT_EQ(got.finish, FinishReason::kCancelled) << "request " << i;
      continue;
    }
    auto solo = engine(plain);
    RequestHandle h = solo->submit(requests[i]);
    run_until_idle(*solo);
    const Result want = drain(h);
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    EXPECT_TRUE(same_bits(got.logprobs, want.logprobs)) << "request " << i;
  }
}

// Prompt logprobs (echo): every prompt token after the first gets its logprob under the model and
// its alternatives in the first chunk, the same bits a one-shot forward over the prompt gives,
// whatever the chunking, and the request's own tokens are those it gets without them. With prefix
// caching on and its prompt cached, it still computes the whole prompt.
TEST_F(EngineTest, PromptLogprobsAreTheOneShotForwardsAndChangeNoToken) {
  const std::vector<int32_t> prompt = ids(150, 61);
  GenerateRequest with = request(prompt, 3);
  with.prompt_logprobs = 2;
  const Result plain = alone(request(prompt, 3));

  const ModelConfig& cfg = model_->config();
  SequenceCache cache = model_->new_sequence(*ops_, 200, false);
  ForwardBatch batch;
  batch.options.logits = LogitsFor::kAllTokens;
  batch.add(cache, prompt);
  const ForwardResult whole = model_->forward(*ops_, batch);  // CPU: the logits are host memory
  const float* all = whole.logits.view().data<float>();
  const std::vector<float> logits(all, all + whole.logits.numel());
  const auto V = static_cast<size_t>(cfg->vocab_size);

  for (const bool caching : {false, true}) {
    EngineConfig c = long_prompt_config();
    c.max_num_batched_tokens = 48;  // chunks of 48
    c.enable_prefix_caching = caching;
    auto e = engine(c);
    if (caching) {  // the same prompt computed and cached first
      RequestHandle first = e->submit(request(prompt, 1));
      run_until_idle(*e);
      drain(first);
    }
    RequestHandle h = e->submit(with);
    run_until_idle(*e);
    const OutputChunk first = h.next();
    Result rest = drain(h);
    ASSERT_EQ(first.prompt_logprobs.size(), prompt.size() - 1) << "caching " << caching;
    for (size_t k = 0; k + 1 < prompt.size(); ++k) {
      const TokenChoice want = token_logprobs(std::span<const float>(logits).subspan(k * V, V), prompt[k + 1], 2);
      const GeneratedToken& got = first.prompt_logprobs[k];
      ASSERT_EQ(got.id, prompt[k + 1]);
      ASSERT_TRUE(same_bits({got.logprob}, {want.logprob})) << "prompt token " << k + 1;
      ASSERT_EQ(got.rank, want.rank) << "prompt token " << k + 1;
      ASSERT_EQ(got.top.size(), 2u);
      EXPECT_EQ(got.top[0].id, want.top[0].first);
    }
    std::vector<int32_t> tokens;
    for (const GeneratedToken& t : first.tokens) tokens.push_back(t.id);
    tokens.insert(tokens.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(tokens, plain.tokens);
    EXPECT_EQ(rest.last.metrics->cached_tokens, 0);
  }
  GenerateRequest bad = request(prompt, 3);
  bad.prompt_logprobs = 21;
  EXPECT_THROW(engine()->submit(bad), UsageError);
}

// min_tokens: a stop token id that greedy decoding picks first is not drawn before min_tokens
// tokens (the greedy choice among the rest), and a stop string does not end the request before.
TEST_F(EngineTest, MinTokensHoldsBackEveryStop) {
  GenerateRequest r = request(ids(20, 71), 6);
  r.sampling.logprobs = false;
  const Result free = alone(r);
  ASSERT_EQ(free.tokens.size(), 6u);
  r.stop.stop_token_ids = {free.tokens[0]};
  const Result stopped = alone(r);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>{free.tokens[0]});
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  r.stop.min_tokens = 3;
  const Result held = alone(r);
  ASSERT_GE(held.tokens.size(), 3u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NE(held.tokens[i], free.tokens[0]) << "token " << i;
  EXPECT_TRUE(held.finish == FinishReason::kLength || held.tokens.back() == free.tokens[0]);
  r.stop.min_tokens = 7;  // more than max_tokens
  EXPECT_THROW(engine()->submit(r), UsageError);
  r.stop.min_tokens = -1;
  EXPECT_THROW(engine()->submit(r), UsageError);
}

// allowed_token_ids: sampled requests (temperature 1, several seeds) draw only the listed tokens;
// a greedy one takes at each step the listed token of largest raw logit (the backend's draw
// must not skip the list) and reports that token's raw logprob; an id outside the
// vocabulary is refused; min_tokens holding back the only listed token ends the request with an
// error naming allowed_token_ids.
TEST_F(EngineTest, AllowedTokenIdsRestrictEveryDraw) {
  const auto [prompt, plain, free] = greedy_baseline();
  ASSERT_EQ(free.tokens.size(), 6u);
  std::vector<int32_t> listed;  // two tokens greedy decoding does not pick
  for (int32_t id = 1000; listed.size() < 2; id += 997)
    if (std::find(free.tokens.begin(), free.tokens.end(), id) == free.tokens.end()) listed.push_back(id);

  auto e = engine();
  std::vector<RequestHandle> sampled;
  for (uint32_t seed = 0; seed < 4; ++seed) {
    GenerateRequest r = request(ids(9, 90 + seed), 8, 1.0f);
    r.sampling.seed = seed;
    r.sampling.allowed_token_ids = listed;
    sampled.push_back(e->submit(r));
  }
  run_until_idle(*e);
  for (RequestHandle& h : sampled) {
    const Result got = drain(h);
    ASSERT_EQ(got.tokens.size(), 8u) << got.last.error;
    for (int32_t id : got.tokens) EXPECT_TRUE(id == listed[0] || id == listed[1]) << id;
  }

  GenerateRequest greedy = plain;
  greedy.sampling.allowed_token_ids = listed;
  const Result chosen = alone(greedy);
  ASSERT_EQ(chosen.tokens.size(), 6u);
  GenerateRequest scored = greedy;
  scored.sampling.logprobs = true;
  const Result with_logprobs = alone(scored);
  EXPECT_EQ(with_logprobs.tokens, chosen.tokens);
  // The raw logits at each step, from one forward over the prompt and the tokens chosen.
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), chosen.tokens.begin(), chosen.tokens.end() - 1);
  SequenceCache cache = model_->new_sequence(*ops_, 64, false);
  ForwardBatch batch;
  batch.options.logits = LogitsFor::kAllTokens;
  batch.add(cache, sequence);
  const ForwardResult whole = model_->forward(*ops_, batch);  // CPU: the logits are host memory
  const std::span<const float> logits(whole.logits.view().data<float>(), static_cast<size_t>(whole.logits.numel()));
  const auto V = static_cast<size_t>(model_->config()->vocab_size);
  for (size_t i = 0; i < chosen.tokens.size(); ++i) {
    const std::span<const float> row = logits.subspan((prompt.size() - 1 + i) * V, V);
    const float a = row[static_cast<size_t>(listed[0])], b = row[static_cast<size_t>(listed[1])];
    EXPECT_EQ(chosen.tokens[i], a >= b ? listed[0] : listed[1]) << "token " << i << ": " << a << " vs " << b;
    EXPECT_NEAR(with_logprobs.logprobs[i], token_logprobs(row, chosen.tokens[i], 0).logprob, 1e-4) << "token " << i;
  }

  GenerateRequest outside = plain;
  outside.sampling.allowed_token_ids = {listed[0], static_cast<int32_t>(V)};
  expect_refused(*engine(), outside, "allowed_token_ids");

  GenerateRequest held = plain;
  held.stop.ignore_eos = false;
  held.stop.min_tokens = 2;
  held.sampling.allowed_token_ids = {static_cast<int32_t>(model_->config()->eos_token_id)};
  const Result failed = alone(held);
  EXPECT_EQ(failed.finish, FinishReason::kError);
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_NE(failed.last.error.find("allowed_token_ids"), std::string::npos) << failed.last.error;
}

// bad_words_ids: greedy output with a bad word equal to its token k (the first not seen before it)
// is the unbanned output up to k and differs from there, the word never drawn (the backend's draw
// must not skip the ban); a two-token word lets its first token through and bans its
// second right after it; sampled requests (several seeds) with their own first two tokens as a
// word never output the pair; an id outside the vocabulary is refused; a ban that leaves
// allowed_token_ids no token ends the request with an error naming bad_words.
TEST_F(EngineTest, BadWordsNeverComeOut) {
  const auto [prompt, plain, free] = greedy_baseline();
  ASSERT_EQ(free.tokens.size(), 6u);
  size_t k = 1;
  while (k < free.tokens.size() && std::count(free.tokens.begin(), free.tokens.begin() + k, free.tokens[k]) > 0) ++k;
  ASSERT_LT(k, free.tokens.size());

  for (const size_t banned_at : {size_t{0}, k}) {
    GenerateRequest banned = plain;
    banned.sampling.bad_words_ids = {{free.tokens[banned_at]}};
    const Result got = alone(banned);
    ASSERT_EQ(got.tokens.size(), 6u) << got.last.error;
    EXPECT_TRUE(std::equal(free.tokens.begin(), free.tokens.begin() + banned_at, got.tokens.begin())) << banned_at;
    EXPECT_NE(got.tokens[banned_at], free.tokens[banned_at]) << banned_at;
    EXPECT_EQ(std::count(got.tokens.begin(), got.tokens.end(), free.tokens[banned_at]), 0) << banned_at;
  }

  GenerateRequest pair = plain;
  pair.sampling.bad_words_ids = {{free.tokens[0], free.tokens[1]}};
  const Result after_first = alone(pair);
  ASSERT_EQ(after_first.tokens.size(), 6u) << after_first.last.error;
  EXPECT_EQ(after_first.tokens[0], free.tokens[0]);
  EXPECT_NE(after_first.tokens[1], free.tokens[1]);

  for (uint32_t seed = 0; seed < 4; ++seed) {
    GenerateRequest r = request(ids(9, 90 + seed), 8, 1.0f);
    r.sampling.logprobs = false;
    r.sampling.seed = seed;
    const Result unbanned = alone(r);
    ASSERT_EQ(unbanned.tokens.size(), 8u);
    const std::vector<int32_t> word = {unbanned.tokens[0], unbanned.tokens[1]};
    r.sampling.bad_words_ids = {word};
    const Result got = alone(r);
    ASSERT_EQ(got.tokens.size(), 8u) << got.last.error;
    EXPECT_EQ(got.tokens[0], word[0]) << seed;  // the same draw for token 0: nothing is banned there
    EXPECT_EQ(std::search(got.tokens.begin(), got.tokens.end(), word.begin(), word.end()), got.tokens.end()) << seed;
  }

  const auto V = static_cast<int32_t>(model_->config()->vocab_size);
  GenerateRequest outside = plain;
  outside.sampling.bad_words_ids = {{free.tokens[0]}, {1, V}};
  expect_refused(*engine(), outside, "bad_words");

  GenerateRequest emptied = plain;
  emptied.sampling.allowed_token_ids = {free.tokens[0]};
  emptied.sampling.bad_words_ids = {{free.tokens[0]}};
  const Result failed = alone(emptied);
  EXPECT_EQ(failed.finish, FinishReason::kError);
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_NE(failed.last.error.find("bad_words"), std::string::npos) << failed.last.error;
}

// cache_memory_bytes sizes the blocks: what is left after max_num_seqs sequences' fixed state, in
// whole blocks; too little for one sequence of max_model_len is refused with the numbers.
TEST_F(EngineTest, CacheMemoryBytesSizeTheBlocks) {
  const ModelConfig& cfg = model_->config();
  EngineConfig c = small_config();  // 8 sequences, max_model_len 512 = 32 blocks of 16
  c.kv_cache_dtype = KvCacheDtype::kBf16;
  const int64_t fixed = SequenceCache::fixed_bytes(cfg, DType::kBF16);
  const int64_t block = CachePool::block_bytes(cfg, DType::kBF16, 16);
  ASSERT_GT(fixed, 0);
  ASSERT_GT(block, 0);
  c.cache_memory_bytes = 8 * fixed + 40 * block + block - 1;
  auto e = engine(c);
  EXPECT_EQ(e->config().num_cache_blocks, 40);
  EXPECT_EQ(e->cache_bytes(), 8 * fixed + 40 * block);
  EXPECT_LE(e->cache_bytes(), c.cache_memory_bytes);
  c.cache_memory_bytes = 8 * fixed + 31 * block;
  try {
    engine(c);
    FAIL() << "31 blocks accepted for a max_model_len of 32 blocks";
  } catch (const UsageError& err) {
    EXPECT_NE(std::string(err.what()).find("31 blocks of 16 tokens"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("fewer than one sequence of max_model_len = 512"), std::string::npos)
        << err.what();
  }
}

// Caches of packed fp8 entries (kv/packed_entries.h) hold what bf16 rows hold, so every request
// gets the bf16 caches' tokens and logprobs bit for bit: in a busy batch that preempts, in one
// pool per sequence and in the shared pool with prefix caching, where hits resume on pages and
// state snapshots of packed entries (b recomputes the last 508 tokens before its hit, d resumes on
// a's snapshot at 896).
TEST_F(EngineTest, Fp8CachesGiveTheBf16CachesTokensBitForBit) {
  const GenerateRequest r = request(ids(41, 1), 10);
  const Result ref = alone(r);
  for (const bool prefix_caching : {false, true}) {
    EngineConfig c = small_config();
    c.kv_cache_dtype = KvCacheDtype::kFp8;
    c.num_cache_blocks = 12;
    c.enable_prefix_caching = prefix_caching;
    c.kv_canary = true;
    auto e = engine(c);
    uint64_t preemptions = 0;
    const Result got = in_busy_batch(*e, r, preemptions);
    EXPECT_EQ(got.tokens, ref.tokens) << "prefix caching " << prefix_caching;
    EXPECT_TRUE(same_bits(got.logprobs, ref.logprobs)) << "prefix caching " << prefix_caching;
    EXPECT_GT(preemptions, 0u);
  }

  EngineConfig c = long_prompt_config();
  const std::vector<int32_t> first = ids(900, 21);
  std::vector<int32_t> b_prompt(first.begin(), first.begin() + 680), d_prompt = first;
  for (int32_t id : ids(30, 22)) b_prompt.push_back(id);
  for (int32_t id : ids(20, 23)) d_prompt.push_back(id);
  const GenerateRequest a = request(first, 4), b = request(b_prompt, 5), d = request(d_prompt, 5);
  auto plain = engine(c);
  RequestHandle b_miss = plain->submit(b), d_miss = plain->submit(d);
  run_until_idle(*plain);
  const Result want_b = drain(b_miss), want_d = drain(d_miss);

  c.kv_cache_dtype = KvCacheDtype::kFp8;
  c.enable_prefix_caching = true;
  c.kv_canary = true;
  auto packed = engine(c);
  RequestHandle a_first = packed->submit(a);
  run_until_idle(*packed);
  drain(a_first);
  RequestHandle b_hit = packed->submit(b);
  run_until_idle(*packed);
  RequestHandle d_hit = packed->submit(d);
  run_until_idle(*packed);
  const Result got_b = drain(b_hit), got_d = drain(d_hit);
  EXPECT_EQ(got_b.last.metrics->cached_tokens, 640 - 508);
  EXPECT_EQ(got_d.last.metrics->cached_tokens, 896);
  EXPECT_EQ(got_b.tokens, want_b.tokens);
  EXPECT_TRUE(same_bits(got_b.logprobs, want_b.logprobs));
  EXPECT_EQ(got_d.tokens, want_d.tokens);
  EXPECT_TRUE(same_bits(got_d.logprobs, want_d.logprobs));
}

// Packed entries take 584 bytes for an attention entry's 1,024 and 68 for an indexer key's 256,
// so the same bytes of cache hold more blocks; exact math keeps f32 rows and refuses fp8, and so
// does a backend that does not read them.
TEST_F(EngineTest, Fp8CachesTakeThePackedEntriesBytes) {
  const ModelConfig& cfg = model_->config();
  int64_t entry_bytes = 0, rows_bytes = 0;  // one 16-token block's pages, every layer
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l) {
    const int64_t m = cfg.compress_ratio(l);
    if (m == 0) continue;
    const int64_t page_rows = std::max<int64_t>(1, 16 / m);
    const bool csa = cfg.layer_kind(l) == LayerKind::kCsa;
    entry_bytes += page_rows * (584 + (csa ? 68 : 0));
    rows_bytes += page_rows * 2 * (512 + (csa ? 128 : 0));
  }
  EXPECT_EQ(CachePool::block_bytes(cfg, DType::kF8E4M3, 16), entry_bytes);
  EXPECT_EQ(CachePool::block_bytes(cfg, DType::kBF16, 16), rows_bytes);
  const int64_t W = cfg->sliding_window, layers = cfg.num_layers() + cfg.num_mtp_layers();
  EXPECT_EQ(SequenceCache::fixed_bytes(cfg, DType::kBF16) - SequenceCache::fixed_bytes(cfg, DType::kF8E4M3),
            layers * W * (1024 - 584));

  EngineConfig c = small_config();
  c.kv_cache_dtype = KvCacheDtype::kFp8;
  const int64_t fixed = SequenceCache::fixed_bytes(cfg, DType::kF8E4M3);
  c.cache_memory_bytes = 8 * fixed + 40 * entry_bytes;
  auto e = engine(c);
  EXPECT_EQ(e->config().num_cache_blocks, 40);
  EXPECT_EQ(e->cache_bytes(), c.cache_memory_bytes);

  // A backend that does not read packed entries (CUDA with its CPU-order attention) refuses them by name.
  class RowsOnlyOps final : public testing::CpuForwardingOps {
   public:
    std::string_view name() const override { return "rows-only"; }
    bool reads_packed_caches() const override { return false; }
  } rows_only;
  try {
    Engine refused(*model_, rows_only, c, nullptr);
    FAIL() << "fp8 caches accepted by a backend that does not read them";
  } catch (const UsageError& err) {
    EXPECT_NE(std::string(err.what()).find("the rows-only backend does not read packed cache entries"),
              std::string::npos)
        << err.what();
  }

  c.exact_math = true;
  try {
    engine(c);
    FAIL() << "fp8 caches accepted with exact math";
  } catch (const UsageError& err) {
    EXPECT_NE(std::string(err.what()).find("exact math keeps its caches in f32"), std::string::npos) << err.what();
  }
}

// vLLM's server defaults by device memory; the CPU backend has none, so 2048.
// A max_model_len past the model's positions would fail every request's first step (the cache
// holds that many positions; the forward takes none past max_position_embeddings): refused when the
// engine is made, naming both numbers.
TEST_F(EngineTest, MaxModelLenBeyondTheModelsPositionsIsRefused) {
  const int64_t positions = model_->config()->max_position_embeddings;
  EngineConfig c = small_config();
  c.max_model_len = positions + 1;
  try {
    engine(c);
    FAIL() << "max_model_len " << c.max_model_len << " accepted";
  } catch (const UsageError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("max_model_len = " + std::to_string(positions + 1)), std::string::npos) << what;
    EXPECT_NE(what.find("max_position_embeddings (" + std::to_string(positions) + ")"), std::string::npos) << what;
  }
  c.max_model_len = -1;
  EXPECT_THROW(engine(c), UsageError);
  c.max_model_len = positions;  // the longest allowed
  c.num_cache_blocks = 4;
  EXPECT_EQ(engine(c)->config().max_model_len, positions);
}

TEST(EngineDefaults, MaxNumBatchedTokensFollowTheDevicesMemory) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(default_max_num_batched_tokens(0), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(40 * kGiB), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(70 * kGiB - 1), 2048);
  EXPECT_EQ(default_max_num_batched_tokens(70 * kGiB), 8192);
  EXPECT_EQ(default_max_num_batched_tokens(141 * kGiB), 8192);  // the H200
}

TEST_F(EngineTest, MaxNumBatchedTokensOfZeroTakeTheDevicesDefault) {
  EngineConfig c = small_config();
  c.max_num_batched_tokens = 0;
  EXPECT_EQ(engine(c)->config().max_num_batched_tokens, 2048);
  c.max_num_batched_tokens = -1;
  try {
    engine(c);
    FAIL() << "max_num_batched_tokens -1 accepted";
  } catch (const UsageError& err) {
    EXPECT_NE(std::string(err.what()).find("max_num_batched_tokens = -1 must not be negative"), std::string::npos)
        << err.what();
  }
}

TEST_F(EngineTest, TooLongRequestsAreRefusedWithTheLimits) {
  auto e = engine();
  expect_refused(*e, request(ids(500, 7), 20), "maximum context length is 512");  // 520 tokens
  GenerateRequest no_room = request(ids(512, 7), 1);
  no_room.stop.max_tokens.reset();  // up to max_model_len: nothing left
  EXPECT_THROW(e->submit(no_room), UsageError);
  EXPECT_THROW(e->submit(request({}, 4)), UsageError);
  EXPECT_THROW(e->submit(request({200000}, 4)), UsageError);  // outside the vocabulary
  GenerateRequest strings = request(ids(4, 7), 4);
  strings.stop.stop_strings = {"x"};
  EXPECT_THROW(e->submit(strings), UsageError);  // no tokenizer
  GenerateRequest json_object = request(ids(4, 7), 4);
  json_object.format = OutputFormat::kJsonObject;
  EXPECT_THROW(e->submit(json_object), UsageError);  // no tokenizer
  EXPECT_FALSE(e->step());
}

TEST_F(EngineTest, StopTokenIdsAndMaxTokensEndTheStream) {
  const GenerateRequest r = request(ids(12, 8), 8);
  const Result ref = alone(r);
  GenerateRequest stopped = r;
  stopped.stop.stop_token_ids = {ref.tokens[3]};
  const Result got = alone(stopped);
  const auto first = std::find(ref.tokens.begin(), ref.tokens.end(), ref.tokens[3]);
  EXPECT_EQ(got.tokens, std::vector<int32_t>(ref.tokens.begin(), first + 1));
  EXPECT_EQ(got.finish, FinishReason::kStop);
  EXPECT_EQ(got.last.stop_token_id, ref.tokens[3]);
  GenerateRequest shorter = r;
  shorter.stop.max_tokens = 3;
  const Result three = alone(shorter);
  EXPECT_EQ(three.tokens, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + 3));
  EXPECT_EQ(three.finish, FinishReason::kLength);
  EXPECT_EQ(three.last.metrics->completion_tokens, 3);
  EXPECT_GE(three.last.metrics->time_per_output_token_s(), 0.0);
}

TEST_F(EngineTest, StopStringsCutTheTextAndTheStreamedTextIsTheDecodedText) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  GenerateRequest r = request(tokenizer->encode("The quick brown fox jumps over"), 12);
  auto e = engine(small_config(), tokenizer);
  RequestHandle h = e->submit(r);
  run_until_idle(*e);
  const Result ref = drain(h);
  std::vector<int32_t> known;  // ids the tokenizer has (the random model may pick others)
  for (int32_t id : ref.tokens)
    if (id < tokenizer->vocab_size()) known.push_back(id);
  EXPECT_EQ(ref.text, tokenizer->decode(known));
  ASSERT_GE(ref.text.size(), 6u);
  // A stop string from the middle of the text: the stream ends there, the text stops before it.
  const std::string stop = ref.text.substr(ref.text.size() / 2, 2);
  r.stop.stop_strings = {"never appears \x01", stop};
  auto e2 = engine(small_config(), tokenizer);
  RequestHandle h2 = e2->submit(r);
  run_until_idle(*e2);
  const Result got = drain(h2);
  EXPECT_EQ(got.finish, FinishReason::kStop);
  EXPECT_EQ(got.last.stop_string, stop);
  EXPECT_EQ(got.text, ref.text.substr(0, ref.text.find(stop)));
  EXPECT_LE(got.tokens.size(), ref.tokens.size());
  // include_stop_str_in_output: the stop string stays, what follows it goes.
  r.stop.include_stop_string = true;
  auto e3 = engine(small_config(), tokenizer);
  RequestHandle h3 = e3->submit(r);
  run_until_idle(*e3);
  EXPECT_EQ(drain(h3).text, ref.text.substr(0, ref.text.find(stop) + stop.size()));
}

// The model's forward, then `bias` added to the logits of the `favoured` tokens: the random model
// then writes mostly JSON punctuation (and would end or open a special token at once if it
// could), so the mask has to refuse most of its favourites and objects close within a few dozen
// tokens.
class BiasedForward final : public ForwardRunner {
 public:
  BiasedForward(std::vector<int32_t> favoured, float bias) : favoured_(std::move(favoured)), bias_(bias) {}
  ForwardResult forward(const Model& model, Ops& ops, const ForwardBatch& batch) override {
    ForwardResult result = model.forward(ops, batch);
    const int64_t rows = result.logits.dim(0), vocab = result.logits.dim(1);
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    const TensorView host(reinterpret_cast<std::byte*>(logits.data()), DType::kF32, {rows, vocab});
    ops.download(result.logits.view(), host);
    for (int64_t row = 0; row < rows; ++row)
      for (int32_t id : favoured_) logits[static_cast<size_t>(row * vocab + id)] += bias_;
    ops.upload(host, result.logits.view());
    return result;
  }

 private:
  std::vector<int32_t> favoured_;
  float bias_;
};

// The model's logits, or all NaN while `poison` is set (a forward gone wrong).
class PoisonableForward final : public ForwardRunner {
 public:
  bool poison = false;
  ForwardResult forward(const Model& model, Ops& ops, const ForwardBatch& batch) override {
    ForwardResult result = model.forward(ops, batch);
    if (!poison) return result;
    std::vector<float> nan(static_cast<size_t>(result.logits.dim(0) * result.logits.dim(1)),
                           std::numeric_limits<float>::quiet_NaN());
    ops.upload(host_view(nan.data(), DType::kF32, result.logits.shape()), result.logits.view());
    return result;
  }
};

// nlohmann reads all of `text` and then runs out: `text` is the start of a JSON document.
void expect_json_prefix(const std::string& text) {
  try {
    const nlohmann::json whole = nlohmann::json::parse(text);
    ADD_FAILURE() << "a whole document, yet not closed: " << whole.dump();
  } catch (const nlohmann::json::parse_error& e) {
    EXPECT_EQ(e.byte, text.size() + 1) << text << "\n" << e.what();
  }
}

// Whatever ended it, a JSON object request's text is its tokens' text (no special token among
// them), and one JSON object when the object closed it (kStop, no stop token), else a prefix.
// Returns whether the object closed.
bool expect_json_object_or_prefix(const Result& r, const Tokenizer& tokenizer) {
  EXPECT_EQ(r.text, tokenizer.decode(r.tokens));
  for (int32_t id : r.tokens) EXPECT_EQ(tokenizer.token_kind(id), Tokenizer::TokenKind::kVocabulary) << id;
  const size_t start = r.text.find_first_not_of(" \t\r\n");
  EXPECT_TRUE(start == std::string::npos || r.text[start] == '{') << r.text;
  if (r.finish == FinishReason::kStop) {
    EXPECT_FALSE(r.last.stop_token_id.has_value());
    EXPECT_TRUE(nlohmann::json::parse(r.text).is_object()) << r.text;  // parse throws if it is not JSON
    return true;
  }
  EXPECT_EQ(r.finish, FinishReason::kLength) << r.last.error;
  expect_json_prefix(r.text);
  return false;
}

// Eight sampled JSON object requests (seeds 0..7, with `schema` if any) on `e`, run to the end.
std::vector<Result> favoured_json_requests(Engine& e, const Tokenizer& tokenizer,
                                           const std::shared_ptr<const JsonSchema>& schema) {
  std::vector<RequestHandle> handles;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    GenerateRequest r = request(tokenizer.encode("Reply with a JSON object."), 64, 1.0f);
    r.sampling.seed = seed;
    r.format = OutputFormat::kJsonObject;
    r.json_schema = schema;
    handles.push_back(e.submit(r));
  }
  for (int i = 0; i < 10000 && e.step(); ++i) {
  }
  std::vector<Result> results;
  for (RequestHandle& h : handles) results.push_back(drain(h));
  return results;
}

// The token of each piece, each one token of the vocabulary.
std::vector<int32_t> single_tokens(const Tokenizer& tokenizer, std::initializer_list<const char*> pieces) {
  std::vector<int32_t> ids;
  for (const char* piece : pieces) {
    const std::vector<int32_t> one = tokenizer.encode(piece);
    EXPECT_EQ(one.size(), 1u) << piece;
    ids.push_back(one.at(0));
  }
  return ids;
}

// A sampled request whose logits hold no number to draw from ends with an error that says so,
// gives its blocks back, and the engine serves the next request.
TEST_F(EngineTest, ARequestWithoutDrawableLogitsFailsAloneAndTheEngineGoesOn) {
  PoisonableForward forward;
  EngineConfig config = small_config();
  config.runner = &forward;
  auto e = engine(config);
  forward.poison = true;
  RequestHandle poisoned = e->submit(request(ids(9, 3), 4, 1.0f));
  run_until_idle(*e);
  const Result failed = drain(poisoned);
  EXPECT_EQ(failed.finish, FinishReason::kError);
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_NE(failed.last.error.find("sampling failed"), std::string::npos) << failed.last.error;
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
  forward.poison = false;
  RequestHandle next = e->submit(request(ids(9, 3), 4, 1.0f));
  run_until_idle(*e);
  const Result served = drain(next);
  EXPECT_EQ(served.finish, FinishReason::kLength) << served.last.error;
  EXPECT_EQ(served.tokens.size(), 4u);
}

TEST_F(EngineTest, JsonObjectRequestsWriteOneObjectWhenTheModelFavoursPunctuation) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  // No "e": a long exponent overflows a double, which JSON allows and nlohmann does not.
  std::vector<int32_t> favoured = single_tokens(*tokenizer, {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "0", "1", "-",
                                                             ".", "true", "null", "\\", "u", "\":", "\",", "},", "],",
                                                             "{\"", "\"}", "abc"});
  favoured.push_back(static_cast<int32_t>(model_->config()->eos_token_id));
  favoured.push_back(*tokenizer->token_id("<think>"));
  BiasedForward biased(favoured, 30.0f);
  EngineConfig config = small_config();
  config.runner = &biased;
  auto e = engine(config, tokenizer);
  int closed = 0;
  for (const Result& r : favoured_json_requests(*e, *tokenizer, nullptr)) closed += expect_json_object_or_prefix(r, *tokenizer);
  EXPECT_GE(closed, 4);
}

// With a JSON schema (GenerateRequest::json_schema) the objects that close are ones the schema
// accepts: the named keys only, the required one present, an integer and an enum string.
TEST_F(EngineTest, JsonSchemaRequestsWriteObjectsTheSchemaAccepts) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  BiasedForward biased(single_tokens(*tokenizer, {"{", "}", "\"", ":", ",", " ", "0", "1", "7", "-", ".", "a", "b", "x",
                                                  "y", "z", "true", "null", "\":", "\",", "{\"", "\"}"}),
                       30.0f);
  EngineConfig config = small_config();
  config.runner = &biased;
  auto e = engine(config, tokenizer);
  const auto schema = JsonSchema::compile(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}},
          "required": ["a"], "additionalProperties": false})"));
  int closed = 0;
  for (const Result& r : favoured_json_requests(*e, *tokenizer, schema)) {
    if (!expect_json_object_or_prefix(r, *tokenizer)) continue;
    ++closed;
    const nlohmann::json object = nlohmann::json::parse(r.text);
    ASSERT_TRUE(object.contains("a") && object["a"].is_number_integer()) << r.text;
    for (const auto& [key, value] : object.items()) {
      EXPECT_TRUE(key == "a" || key == "b") << r.text;
      if (key == "b") {
        EXPECT_TRUE(value == "x" || value == "y") << r.text;
      }
    }
  }
  EXPECT_GE(closed, 4);
  GenerateRequest text = request(ids(4, 7), 4);
  text.json_schema = schema;
  EXPECT_THROW(e->submit(text), UsageError);  // a schema needs the JSON output format
}

TEST_F(EngineTest, JsonObjectRequestsOfTheRandomModelArePrefixesGreedyAndSampled) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  auto e = engine(small_config(), tokenizer);
  std::vector<RequestHandle> handles;
  for (float temperature : {0.0f, 0.7f, 1.5f}) {
    GenerateRequest r = request(ids(9, 3), 24, temperature);
    r.sampling.seed = 5;
    r.format = OutputFormat::kJsonObject;
    handles.push_back(e->submit(r));
  }
  handles.push_back(e->submit(request(ids(9, 3), 24)));  // the same prompt unconstrained, beside them
  run_until_idle(*e);
  for (size_t i = 0; i + 1 < handles.size(); ++i) expect_json_object_or_prefix(drain(handles[i]), *tokenizer);
  // Unconstrained, the same prompt does not start an object: the constraint made the difference.
  const std::string text = drain(handles.back()).text;
  const size_t start = text.find_first_not_of(" \t\r\n");
  ASSERT_NE(start, std::string::npos);
  EXPECT_NE(text[start], '{') << text;
}

// guided_choice: greedy and sampled requests of the random model write one of the choices and end
// with kStop, by the end of sequence where a choice begins a longer one ("yes" / "yes, certainly")
// or at once when none does.
TEST_F(EngineTest, ChoiceRequestsWriteOneOfTheChoices) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  auto e = engine(small_config(), tokenizer);
  const auto choices = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{"positive", "negative", "neutral", "yes", "yes, certainly", "\u00e9t\u00e9 \u2014 ok"});
  std::vector<RequestHandle> handles = submit_sampled_grid(*e, 32, [&](GenerateRequest& r) {
    r.format = OutputFormat::kChoice;
    r.choices = choices;
  });
  run_until_idle(*e);
  for (RequestHandle& h : handles) {
    const Result got = drain(h);
    EXPECT_EQ(got.finish, FinishReason::kStop) << got.last.error;
    EXPECT_NE(std::find(choices->begin(), choices->end(), got.text), choices->end()) << got.text;
    if (got.last.stop_token_id) {
      EXPECT_EQ(got.text, "yes");  // only there may the end of sequence come
    }
  }
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
}

// allowed_token_ids beside guided_choice: only tokens both allow are drawn, so listing the tokens
// of one choice makes every seed write that choice; listing tokens no choice begins with ends the
// request with an error naming allowed_token_ids.
TEST_F(EngineTest, AllowedTokenIdsMeetAChoiceConstraint) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  auto e = engine(small_config(), tokenizer);
  const auto choices = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"positive", "negative"});
  std::vector<RequestHandle> handles = submit_sampled_grid(*e, 16, [&](GenerateRequest& r) {
    r.format = OutputFormat::kChoice;
    r.choices = choices;
    r.sampling.allowed_token_ids = tokenizer->encode("negative");
  });
  run_until_idle(*e);
  for (RequestHandle& h : handles) {
    const Result got = drain(h);
    EXPECT_EQ(got.finish, FinishReason::kStop) << got.last.error;
    EXPECT_EQ(got.text, "negative");
  }
  GenerateRequest r = request(ids(9, 3), 8);
  r.format = OutputFormat::kChoice;
  r.choices = choices;
  r.sampling.allowed_token_ids = tokenizer->encode(" zebra");
  RequestHandle h = e->submit(r);
  run_until_idle(*e);
  const Result got = drain(h);
  EXPECT_EQ(got.finish, FinishReason::kError);
  EXPECT_NE(got.last.error.find("allowed_token_ids"), std::string::npos) << got.last.error;
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
}

TEST_F(EngineTest, ChoiceRequestsAreRefusedWithoutValidChoices) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  auto e = engine(small_config(), tokenizer);
  GenerateRequest r = request(ids(4, 7), 4);
  r.choices = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"a"});
  expect_refused(*e, r, "choice output format");  // choices without kChoice
  r.format = OutputFormat::kChoice;
  r.choices = nullptr;
  expect_refused(*e, r, "list of choices");
  r.choices = std::make_shared<const std::vector<std::string>>();
  expect_refused(*e, r, "empty");
  r.choices = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"a", ""});
  expect_refused(*e, r, "choice 1");
  r.choices = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"a"});
  r.stop.min_tokens = 1;
  expect_refused(*e, r, "min_tokens");
  auto untokenized = engine(small_config());
  r.stop.min_tokens = 0;
  EXPECT_THROW(untokenized->submit(r), UsageError);  // the constraint needs the tokenizer
}

// guided_regex: greedy and sampled requests of the random model write a whole match of a bounded
// pattern (multi-byte characters included) and end with kStop: by the end of sequence only where
// the match could go on, else once no byte can extend it.
TEST_F(EngineTest, RegexRequestsWriteAWholeMatch) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  auto e = engine(small_config(), tokenizer);
  const auto regex = std::make_shared<const RegexNfa>(
      RegexNfa::compile("(yes|no|peut-\u00eatre), [a-z]{2,5}( \\d{1,3})?[.!\u2014]"));
  std::vector<RequestHandle> handles = submit_sampled_grid(*e, 40, [&](GenerateRequest& r) {
    r.format = OutputFormat::kRegex;
    r.regex = regex;
  });
  run_until_idle(*e);
  for (RequestHandle& h : handles) {
    const Result got = drain(h);
    EXPECT_EQ(got.finish, FinishReason::kStop) << got.last.error;
    EXPECT_TRUE(regex->full_match(got.text)) << got.text;
    EXPECT_FALSE(got.last.stop_token_id.has_value()) << got.text;  // a match here never goes on
  }
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
  // Where a match may go on, the request ends by the end of sequence or max_tokens, a match either way.
  const auto open_ended = std::make_shared<const RegexNfa>(RegexNfa::compile("[a-z ]{1,60}"));
  std::vector<RequestHandle> open_handles;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    GenerateRequest r = request(ids(9, 5 + static_cast<int>(seed)), 12, 1.0f);
    r.sampling.seed = seed;
    r.format = OutputFormat::kRegex;
    r.regex = open_ended;
    open_handles.push_back(e->submit(r));
  }
  run_until_idle(*e);
  for (RequestHandle& h : open_handles) {
    const Result got = drain(h);
    ASSERT_NE(got.finish, FinishReason::kError) << got.last.error;
    // max_tokens may stop it first: then the text is the start of a match, here a match itself.
    EXPECT_TRUE(open_ended->full_match(got.text)) << got.text;
  }
}

TEST_F(EngineTest, RegexRequestsAreRefusedWithoutAPatternOrATokenizer) {
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(DSV4_TOKENIZER_JSON));
  auto e = engine(small_config(), tokenizer);
  GenerateRequest r = request(ids(4, 7), 4);
  r.regex = std::make_shared<const RegexNfa>(RegexNfa::compile("a+"));
  expect_refused(*e, r, "regex output format");  // a regex without kRegex
  r.format = OutputFormat::kRegex;
  r.regex = nullptr;
  expect_refused(*e, r, "compiled regex");
  r.regex = std::make_shared<const RegexNfa>(RegexNfa::compile("a+"));
  r.stop.min_tokens = 1;
  expect_refused(*e, r, "min_tokens");
  auto untokenized = engine(small_config());
  r.stop.min_tokens = 0;
  EXPECT_THROW(untokenized->submit(r), UsageError);  // the constraint needs the tokenizer
}

// A tokenizer whose every token lies beyond the model's vocabulary: no token can start the object.
TEST_F(EngineTest, AJsonObjectRequestNoTokenCanContinueFails) {
  using nlohmann::json;
  const int32_t first = static_cast<int32_t>(model_->config()->vocab_size);
  json vocab = json::object();
  int extra = 256;
  for (int b = 0; b < 256; ++b) {  // GPT-2's byte-level characters: printable bytes as themselves
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int code = printable ? b : extra++;
    std::string c;
    if (code < 0x80) {
      c += static_cast<char>(code);
    } else {
      c += static_cast<char>(0xC0 | (code >> 6));
      c += static_cast<char>(0x80 | (code & 0x3F));
    }
    vocab[c] = first + b;
  }
  const json tokenizer_json = {
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  const auto file = std::filesystem::path(::testing::TempDir()) / (std::to_string(getpid()) + "_far_tokenizer.json");
  std::ofstream(file) << tokenizer_json.dump();
  auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(file));
  std::filesystem::remove(file);
  auto e = engine(small_config(), tokenizer);
  GenerateRequest r = request(ids(6, 4), 8);
  r.format = OutputFormat::kJsonObject;
  RequestHandle h = e->submit(r);
  run_until_idle(*e);
  const Result got = drain(h);
  EXPECT_EQ(got.finish, FinishReason::kError);
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_NE(got.last.error.find("JSON"), std::string::npos) << got.last.error;
  EXPECT_EQ(e->stats().cache_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
}

TEST_F(EngineTest, TheEngineThreadServesSubmittingThreads) {
  auto e = engine();
  e->start();
  std::vector<std::thread> clients;
  std::vector<Result> results(4);
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] {
      RequestHandle h = e->submit(request(ids(10 + 5 * t, 20 + t), 5 + t));
      results[static_cast<size_t>(t)] = drain(h);
    });
  for (std::thread& c : clients) c.join();
  e->stop();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(results[static_cast<size_t>(t)].tokens.size(), static_cast<size_t>(5 + t));
    EXPECT_EQ(results[static_cast<size_t>(t)].finish, FinishReason::kLength);
  }
  const EngineStats s = e->stats();
  EXPECT_EQ(s.requests_finished, 4u);
  EXPECT_EQ(s.generation_tokens, 5u + 6u + 7u + 8u);
  EXPECT_EQ(s.time_to_first_token_count, 4u);
  EXPECT_EQ(s.running + s.waiting, 0);
}

// The stats logger prints the engine's line while it serves a request, and nothing once it has
// been idle for a whole interval.
TEST_F(EngineTest, TheStatsLoggerPrintsWhileTheEngineServes) {
  auto e = engine();
  std::mutex mutex;
  std::vector<std::string> lines;
  StatsLogger logger(*e, std::chrono::milliseconds(20), [&](const std::string& line) {
    std::lock_guard lock(mutex);
    lines.push_back(line);
  });
  e->start();
  RequestHandle h = e->submit(request(ids(60, 5), 40));
  EXPECT_EQ(drain(h).tokens.size(), 40u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // idle intervals, past the last busy one
  size_t after_idle = 0;
  {
    std::lock_guard lock(mutex);
    after_idle = lines.size();
    ASSERT_GT(after_idle, 0u);
    const bool generated = std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("Avg generation throughput: 0.0 ") == std::string::npos && l.find("Running: 1 reqs") != std::string::npos;
    });
    EXPECT_TRUE(generated) << lines.front();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  e->stop();
  std::lock_guard lock(mutex);
  EXPECT_EQ(lines.size(), after_idle) << lines.back();
}

}  // namespace
}  // namespace dsv4
