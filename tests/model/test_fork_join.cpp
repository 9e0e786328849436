// The fork/join contract on the CPU: Ops' default runs the main task, then the side tasks in slot
// order, skipping empty slots; the attention layer hands exactly its independent chains to it (Q/KV
// path, attention compressor, indexer compressor, indexer queries or the KV path, by layer kind;
// then the output projections beside the window write); and those chains really are independent: running them in another legal order gives the same bits.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu_forwarding_ops.h"
#include "model/attention.h"
#include "model_test_util.h"

namespace dsv4::testing {
namespace {

TEST(ForkJoinContract, MainThenSidesInSlotOrderEmptySlotsSkipped) {
  cpu::CpuOps ops(1);
  std::vector<std::string> ran;
  ForkJoinTasks tasks;
  tasks.chain = "test";
  tasks.tokens = 1;
  tasks.main = [&] { ran.push_back("main"); };
  tasks.side[0] = [&] { ran.push_back("side0"); };
  tasks.side[2] = [&] { ran.push_back("side2"); };
  ops.fork_join(tasks);
  EXPECT_EQ(ran, (std::vector<std::string>{"main", "side0", "side2"}));

  ran.clear();
  tasks.main = nullptr;
  tasks.side[0] = nullptr;
  tasks.side[1] = [&] { ran.push_back("side1"); };
  ops.fork_join(tasks);
  EXPECT_EQ(ran, (std::vector<std::string>{"side1", "side2"}));
}

TEST(ForkJoinContract, AnExceptionFromATaskLeavesTheCall) {
  cpu::CpuOps ops(1);
  bool later_ran = false;
  ForkJoinTasks tasks;
  tasks.main = [] { throw UsageError("from the main task"); };
  tasks.side[0] = [&] { later_ran = true; };
  EXPECT_THROW(ops.fork_join(tasks), UsageError);
  EXPECT_FALSE(later_ran);
}

// Forwards every op to CpuOps (CpuForwardingOps); records which task each linear runs in, and
// runs fork/joins in a chosen order: the default (sequential contract), or the side tasks in
// reverse slot order before the main task (legal only if the chains are independent, which is the
// point).
class RecordingOps final : public CpuForwardingOps {
 public:
  struct ForkJoinRecord {
    std::string chain;
    int64_t tokens = 0;
    // Names of the linears' weights each task ran: [0] main, [1 + i] side i; empty slot: none.
    std::array<std::vector<std::string>, 1 + kMaxSideTasks> linears;
    std::array<bool, kMaxSideTasks> side_present{};
  };

  explicit RecordingOps(bool sides_first_reversed) : reversed_(sides_first_reversed) {}

  std::vector<ForkJoinRecord> records;

  std::string_view name() const override { return "recording-cpu"; }
  void linear(const LinearParams& p) override {
    if (task_ >= 0) records.back().linears[static_cast<size_t>(task_)].push_back(p.w->name);
    cpu_.linear(p);
  }

  void fork_join(const ForkJoinTasks& tasks) override {
    ForkJoinRecord r;
    r.chain = std::string(tasks.chain);
    r.tokens = tasks.tokens;
    for (size_t i = 0; i < kMaxSideTasks; ++i) r.side_present[i] = static_cast<bool>(tasks.side[i]);
    records.push_back(r);
    const auto run = [&](int task, const std::function<void()>& fn) {
      if (!fn) return;
      task_ = task;
      fn();
      task_ = -1;
    };
    if (reversed_) {
      for (size_t i = kMaxSideTasks; i-- > 0;) run(1 + static_cast<int>(i), tasks.side[i]);
      run(0, tasks.main);
    } else {
      ForkJoinTasks labelled;
      labelled.main = [&] { run(0, tasks.main); };
      for (size_t i = 0; i < kMaxSideTasks; ++i)
        if (tasks.side[i]) labelled.side[i] = [&, i] { run(1 + static_cast<int>(i), tasks.side[i]); };
      Ops::fork_join(labelled);  // the default, sequential contract
    }
  }

 private:
  bool reversed_;
  int task_ = -1;  // the task running now: 0 main, 1 + i side i, -1 outside fork/joins
};

// Final hidden rows of a prefill of `prompt` and then of `decode_steps` single-token forwards of
// two sequences batched together (the second with a shorter prompt), all concatenated.
std::vector<float> prefill_then_decode(const Model& model, Ops& ops, int64_t prompt, int64_t decode_steps) {
  const int64_t V = model.config()->vocab_size;
  const std::vector<int32_t> ids = test_ids(prompt + decode_steps, V, 7);
  const std::vector<int32_t> other = test_ids(prompt / 2 + decode_steps, V, 8);
  SequenceCache a = model.new_sequence(ops, prompt + decode_steps, false);
  SequenceCache b = model.new_sequence(ops, prompt / 2 + decode_steps, false);
  std::vector<float> out = forward_hidden(model, ops, a, std::span(ids).first(static_cast<size_t>(prompt)));
  const std::vector<float> b_prefill = forward_hidden(model, ops, b, std::span(other).first(static_cast<size_t>(prompt / 2)));
  out.insert(out.end(), b_prefill.begin(), b_prefill.end());
  for (int64_t s = 0; s < decode_steps; ++s) {
    ForwardBatch batch;
    batch.options.logits = LogitsFor::kNone;
    batch.add(a, std::span(ids).subspan(static_cast<size_t>(prompt + s), 1));
    batch.add(b, std::span(other).subspan(static_cast<size_t>(prompt / 2 + s), 1));
    const std::vector<float> h = to_floats(model.forward(ops, batch).final_hidden.view());
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

class ModelForkJoin : public ::testing::Test {
 protected:
  static constexpr int64_t kPrompt = 140;  // past the first C128 block
  static constexpr int64_t kDecode = 3;
};

TEST_F(ModelForkJoin, AttentionLayersForkTheirIndependentInputChains) {
  RecordingOps ops(false);
  const Model model = Model::load(ops, tiny_model_dir());
  const ModelConfig& cfg = model.config();
  SequenceCache cache = model.new_sequence(ops, kPrompt, false);
  ops.records.clear();
  forward_hidden(model, ops, cache, test_ids(kPrompt, cfg->vocab_size, 3));

  ASSERT_EQ(static_cast<int64_t>(ops.records.size()), 2 * cfg.num_layers())
      << "two fork/joins per attention layer: its input chains, then its output beside the window write";
  for (int64_t l = 0; l < cfg.num_layers(); ++l) {
    const RecordingOps::ForkJoinRecord& out = ops.records[static_cast<size_t>(2 * l + 1)];
    EXPECT_EQ(out.chain, kOutputChain) << "layer " << l;
    EXPECT_EQ(out.tokens, kPrompt) << "layer " << l;
    EXPECT_EQ(out.linears[0], (std::vector<std::string>{"layers." + std::to_string(l) + ".attn.wo_b.weight"}));
    EXPECT_EQ(out.side_present, (std::array<bool, kMaxSideTasks>{true, false, false})) << "layer " << l;
    EXPECT_TRUE(out.linears[1].empty()) << "layer " << l << ": the window write has no linear";

    const RecordingOps::ForkJoinRecord& r = ops.records[static_cast<size_t>(2 * l)];
    const LayerKind kind = cfg.layer_kind(l);
    const std::string a = "layers." + std::to_string(l) + ".attn.";
    SCOPED_TRACE("layer " + std::to_string(l) + " (" + r.chain + ")");
    EXPECT_EQ(r.chain, layer_kind_name(kind));
    EXPECT_EQ(r.tokens, kPrompt);
    // wq_a and wkv run before the fork (their outputs feed several chains).
    EXPECT_EQ(r.linears[0], (std::vector<std::string>{a + "wq_b.weight"}));
    EXPECT_EQ(r.side_present[0], kind != LayerKind::kSwa);
    EXPECT_EQ(r.side_present[1], kind == LayerKind::kCsa);
    EXPECT_TRUE(r.side_present[2]);  // the indexer's queries (CSA) or the KV path, which has no linear
    if (kind != LayerKind::kSwa) {
      EXPECT_EQ(r.linears[1], (std::vector<std::string>{a + "compressor.wkv.weight", a + "compressor.wgate.weight"}));
    }
    if (kind == LayerKind::kCsa) {
      EXPECT_EQ(r.linears[2], (std::vector<std::string>{a + "indexer.compressor.wkv.weight",
                                                        a + "indexer.compressor.wgate.weight"}));
      EXPECT_EQ(r.linears[3], (std::vector<std::string>{a + "indexer.wq_b.weight", a + "indexer.weights_proj.weight"}));
    } else {
      EXPECT_TRUE(r.linears[3].empty());
    }
  }
}

TEST_F(ModelForkJoin, EveryOrderOfTheChainsGivesTheSameBits) {
  cpu::CpuOps plain(2);
  RecordingOps reversed(true);
  const Model plain_model = Model::load(plain, tiny_model_dir());
  const Model reversed_model = Model::load(reversed, tiny_model_dir());
  const std::vector<float> ref = prefill_then_decode(plain_model, plain, kPrompt, kDecode);
  EXPECT_TRUE(same_bits(prefill_then_decode(reversed_model, reversed, kPrompt, kDecode), ref));
  EXPECT_FALSE(reversed.records.empty());
}

}  // namespace
}  // namespace dsv4::testing
