// Expert parallelism on the CPU (model/expert_parallel.h): three ranks, each a thread with its own
// backend, its own tokens and a third of the routed experts, exchanging rows through an in-process
// expert group, get moe_experts' bits on all experts for their tokens, gate and shared expert
// included, with bf16 activations and FP8 activation quantisation (the default numerics); and two
// ranks running the tiny model's forwards together, each on its own sequence, get the logits the
// sequence gets on one device, whether each holds every expert or loads only its share.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "cpu_test_util.h"
#include "model/expert_parallel.h"
#include "model/model.h"
#include "model_test_util.h"

namespace dsv4 {
namespace {

using testing::make_tensor;
using testing::make_weight;
using testing::random_floats;
using testing::same_bits;
using testing::to_floats;

TEST(ExpertParallel, RanksWithAShareOfTheExpertsEachGetMoeExpertsBits) {
  const int ranks = 3;
  const int64_t D = 256, I = 128, E = 6, k = 2, share = E / ranks;
  const std::vector<int64_t> tokens = {4, 1, 3};
  cpu::CpuOps weights_ops(1);
  std::vector<Weight> weights;
  for (int64_t e = 0; e <= E; ++e) {
    weights.push_back(make_weight(weights_ops, random_floats(I * D, 300 + e, 0.1f), {I, D}));
    weights.push_back(make_weight(weights_ops, random_floats(D * I, 320 + e, 0.1f), {D, I}));
    weights.push_back(make_weight(weights_ops, random_floats(I * D, 340 + e, 0.1f), {I, D}));
  }
  const Weight gate_weight = make_weight(weights_ops, random_floats(E * D, 360, 0.5f), {E, D});
  std::vector<ExpertWeights> routed;
  for (int64_t e = 0; e < E; ++e) routed.push_back({&weights[3 * e], &weights[3 * e + 1], &weights[3 * e + 2]});
  const ExpertWeights shared{&weights[3 * E], &weights[3 * E + 1], &weights[3 * E + 2]};
  MoeGate gate;
  gate.weight = &gate_weight;
  gate.act_quant = ActQuant::kFp8Block128;

  // Each rank's tokens through all experts on one backend: the reference.
  std::vector<std::vector<float>> x(ranks), want(ranks);
  for (int r = 0; r < ranks; ++r) {
    x[r] = random_floats(tokens[r] * D, 400 + r);
    const DeviceTensor tx = make_tensor(weights_ops, DType::kBF16, {tokens[r], D}, x[r]);
    DeviceTensor ex = weights_ops.alloc(DType::kI32, {tokens[r], k}), w = weights_ops.alloc(DType::kF32, {tokens[r], k});
    DeviceTensor out = weights_ops.alloc(DType::kBF16, {tokens[r], D});
    weights_ops.moe_experts({tx.view(), ex.view(), w.view(), routed, &shared, 10.0f, ActQuant::kFp8Block128,
                             ActQuant::kFp8Block128, out.view(), &gate});
    want[r] = to_floats(out.view());
  }

  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(ranks);
  std::vector<std::vector<float>> got(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      cpu::CpuOps ops(1);
      const DeviceTensor tx = make_tensor(ops, DType::kBF16, {tokens[r], D}, x[r]);
      DeviceTensor ex = ops.alloc(DType::kI32, {tokens[r], k}), w = ops.alloc(DType::kF32, {tokens[r], k});
      DeviceTensor out = ops.alloc(DType::kBF16, {tokens[r], D});
      const std::span<const ExpertWeights> mine = std::span(routed).subspan(static_cast<size_t>(r * share), share);
      moe_experts_parallel(ops, *group[static_cast<size_t>(r)],
                           {tx.view(), ex.view(), w.view(), mine, &shared, 10.0f, ActQuant::kFp8Block128,
                            ActQuant::kFp8Block128, out.view(), &gate},
                           E);
      got[r] = to_floats(out.view());
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_TRUE(same_bits(got[r], want[r])) << "rank " << r;
}

TEST(ExpertParallel, ASharesSizeMustMatchTheGroup) {
  cpu::CpuOps ops(1);
  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(1);
  const DeviceTensor x = make_tensor(ops, DType::kBF16, {1, 4}, {1, 2, 3, 4});
  DeviceTensor ex = ops.alloc(DType::kI32, {1, 1}), w = ops.alloc(DType::kF32, {1, 1}), out = ops.alloc(DType::kBF16, {1, 4});
  const MoeExpertsParams p{x.view(), ex.view(), w.view(), {}, nullptr, 0.0f, ActQuant::kNone, ActQuant::kNone, out.view()};
  EXPECT_THROW(moe_experts_parallel(ops, *group[0], p, 4), UsageError);  // no experts held, 4 to hold
  EXPECT_THROW(in_process_expert_group(0), UsageError);
}

// A rank that gives the group up (ExpertComm::abort) wakes the rank waiting for it in an exchange
// with CommError, and every later exchange fails the same way, rather than wait forever.
TEST(ExpertParallel, AnAbortedGroupFailsItsExchangesInsteadOfWaiting) {
  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
  cpu::CpuOps ops(1);
  const DeviceTensor rows = make_tensor(ops, DType::kBF16, {1, 4}, {1, 2, 3, 4});
  const std::vector<ConstTensorView> send = {rows.view(), rows.view()};
  std::string waited;
  std::thread rank0([&] {
    try {
      group[0]->all_to_all(ops, send);
    } catch (const CommError& e) {
      waited = e.what();
    }
  });
  group[1]->abort("rank 1's forward failed");
  rank0.join();
  EXPECT_NE(waited.find("rank 1's forward failed"), std::string::npos) << waited;
  EXPECT_THROW(group[1]->all_to_all(ops, send), CommError);
  EXPECT_THROW(group[0]->all_to_all(ops, send), CommError);
}

// Two ranks run their forwards together, each on its own sequence, holding every expert (and using
// its share) or loading only its share (Model::load with an ExpertShare, in its own backend's
// memory): each sequence gets one device's logits bit for bit.
TEST(ExpertParallel, TwoRanksRunningTheModelTogetherGetOneDevicesLogits) {
  cpu::CpuOps load_ops(2);
  const Model model = Model::load(load_ops, testing::tiny_model_dir());
  const int64_t V = model.config()->vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {testing::test_ids(37, V, 5), testing::test_ids(90, V, 6)};
  for (const bool exact : {false, true}) {
    std::vector<std::vector<float>> want;
    for (const auto& ids : prompts) want.push_back(testing::sequence_logits(model, load_ops, ids, 3, exact, nullptr));
    for (const bool share_alone : {false, true}) {
      const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
      std::vector<std::vector<float>> got(2);
      std::vector<std::thread> ranks;
      for (size_t r = 0; r < 2; ++r)
        ranks.emplace_back([&, r] {
          cpu::CpuOps ops(1);
          const std::optional<Model> share =
              share_alone ? std::optional(Model::load(ops, testing::tiny_model_dir(), {}, {static_cast<int>(r), 2}))
                          : std::nullopt;
          got[r] = testing::sequence_logits(share ? *share : model, ops, prompts[r], 3, exact, group[r].get());
        });
      for (std::thread& t : ranks) t.join();
      for (size_t r = 0; r < 2; ++r)
        EXPECT_TRUE(same_bits(got[r], want[r])) << "rank " << r << (exact ? ", exact math" : "")
                                                << (share_alone ? ", its share loaded alone" : ", every expert held");
    }
  }
}

// A rank with nothing to run in a step still serves its experts (Model::forward_without_tokens):
// rank 1 idles while rank 0 prefills and decodes, then runs a sequence of its own while rank 0
// idles; each sequence gets its one-device logits bit for bit.
TEST(ExpertParallel, ARankWithoutTokensServesItsExpertsToTheOthers) {
  cpu::CpuOps load_ops(2);
  const Model model = Model::load(load_ops, testing::tiny_model_dir());
  const int64_t V = model.config()->vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {testing::test_ids(45, V, 8), testing::test_ids(20, V, 9)};
  const int64_t decode = 2, steps = decode + 1;
  std::vector<std::vector<float>> want;
  for (const auto& ids : prompts) want.push_back(testing::sequence_logits(model, load_ops, ids, decode, false, nullptr));
  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
  std::vector<std::vector<float>> got(2);
  std::vector<std::thread> ranks;
  for (size_t r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      cpu::CpuOps ops(1);
      ExpertComm& comm = *group[r];
      if (r == 1)
        for (int64_t s = 0; s < steps; ++s) model.forward_without_tokens(ops, comm, false);
      got[r] = testing::sequence_logits(model, ops, prompts[r], decode, false, &comm);
      if (r == 0)
        for (int64_t s = 0; s < steps; ++s) model.forward_without_tokens(ops, comm, false);
    });
  for (std::thread& t : ranks) t.join();
  for (size_t r = 0; r < 2; ++r) EXPECT_TRUE(same_bits(got[r], want[r])) << "rank " << r;
}

// A share holds its experts alone (the others neither read nor counted in the load's progress),
// and its forwards need the group whose rank holds them.
TEST(ExpertParallel, AShareHoldsItsExpertsAloneAndNeedsItsGroup) {
  cpu::CpuOps ops(1);
  LoadProgress whole_load, share_load;
  const Model whole = Model::load(ops, testing::tiny_model_dir(), [&](const LoadProgress& p) { whole_load = p; });
  const Model share =
      Model::load(ops, testing::tiny_model_dir(), [&](const LoadProgress& p) { share_load = p; }, {1, 2});
  const int64_t E = whole.config()->n_routed_experts;
  const ModelConfig& cfg = whole.config();
  for (size_t l = 0; l < share.weights().layers.size(); ++l) {
    EXPECT_EQ(share.weights().layers[l].ffn.first_expert, E / 2);
    EXPECT_EQ(static_cast<int64_t>(share.weights().layers[l].ffn.experts.size()), E / 2);
  }
  for (const MtpWeights& m : share.weights().mtp) EXPECT_EQ(static_cast<int64_t>(m.block.ffn.experts.size()), E / 2);
  // Each expert is 3 weights with their scales: 6 tensors, in every layer and MTP layer.
  const auto layers = static_cast<size_t>(cfg.num_layers() + cfg.num_mtp_layers());
  EXPECT_EQ(share_load.tensors_total, whole_load.tensors_total - layers * static_cast<size_t>(E / 2) * 6);
  EXPECT_EQ(share_load.tensors_done, share_load.tensors_total);
  EXPECT_EQ(share_load.bytes_done, share_load.bytes_total);
  EXPECT_LT(share_load.bytes_total, whole_load.bytes_total);
  const Model dummy_share = Model::dummy(ops, cfg, 7, false, {}, {0, 2});
  EXPECT_EQ(static_cast<int64_t>(dummy_share.weights().layers[0].ffn.experts.size()), E / 2);
  EXPECT_EQ(dummy_share.weights().layers[0].ffn.first_expert, 0);

  SequenceCache seq = share.new_sequence(ops, 4, false);
  ForwardBatch batch;
  batch.add(seq, std::vector<int32_t>{1, 2});
  EXPECT_THROW(share.forward(ops, batch), UsageError);  // no group
  const std::vector<std::unique_ptr<ExpertComm>> solo = in_process_expert_group(1);
  batch.options.expert_group = solo[0].get();
  EXPECT_THROW(share.forward(ops, batch), UsageError);  // a group of one holds every expert
  EXPECT_THROW(Model::load(ops, testing::tiny_model_dir(), {}, {2, 2}), UsageError);
  EXPECT_THROW(Model::load(ops, testing::tiny_model_dir(), {}, {0, 3}), UsageError);  // 8 experts over 3
}

}  // namespace
}  // namespace dsv4
