// Dummy weights (`--load-format dummy`): the generator's statistics, the values CpuOps makes in
// each format, argument checks, and a whole model built from them that runs and is reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "config/presets.h"
#include "core/dummy_random.h"
#include "core/error.h"
#include "model/model.h"

namespace dsv4 {
namespace {

TEST(DummyRandom, IsRoughlyStandardNormalBoundedAndKeyed) {
  const uint64_t key = counter_key(7, "layers.0.attn.wq_a.weight");
  const int n = 200000;
  double sum = 0, sum_sq = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const double z = dummy_normal(key, static_cast<uint64_t>(i));
    sum += z;
    sum_sq += z * z;
    amax = std::max(amax, std::fabs(z));
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_LE(amax, kDummyNormalBound);
  EXPECT_GT(amax, 3.0);  // the tails are reached, not cut at a small bound
  EXPECT_EQ(dummy_normal(key, 5), dummy_normal(key, 5));
  EXPECT_NE(counter_key(7, "a"), counter_key(7, "b"));
  EXPECT_NE(counter_key(7, "a"), counter_key(8, "a"));
}

class DummyWeightTest : public ::testing::Test {
 protected:
  static std::vector<float> values(const Weight& w) {
    const float* p = w.data.view().data<float>();
    return std::vector<float>(p, p + w.data.numel());
  }
  cpu::CpuOps ops{1};
};

TEST_F(DummyWeightTest, Fp8ValuesAreE4m3CodesTimesOnePow2Scale) {
  const float std_dev = 1.0f / std::sqrt(384.0f);
  const Weight w = ops.dummy_weight({"w", WeightFormat::kFp8, DType::kBF16, {64, 384}, 99, 0.0f, std_dev});
  EXPECT_EQ(w.shape, Shape({64, 384}));
  const float scale = std::ldexp(1.0f, dummy_fp8_scale_exponent(0.0f, std_dev));
  double sum_sq = 0;
  for (float v : values(w)) {
    ASSERT_EQ(round_e4m3(v / scale), v / scale) << v;
    ASSERT_LE(std::fabs(v / scale), kE4M3Max);
    sum_sq += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(std::sqrt(sum_sq / (64 * 384)), std_dev, 0.05 * std_dev);
}

TEST_F(DummyWeightTest, PlainValuesAreRoundedToTheirDtypeOnly) {
  const Weight bf = ops.dummy_weight({"b", WeightFormat::kPlain, DType::kBF16, {1000}, 3, 1.0f, 0.05f});
  const Weight f = ops.dummy_weight({"b", WeightFormat::kPlain, DType::kF32, {1000}, 3, 1.0f, 0.05f});
  const std::vector<float> vb = values(bf), vf = values(f);
  int unrounded = 0;
  for (size_t i = 0; i < vb.size(); ++i) {
    ASSERT_EQ(vb[i], round_bf16(vf[i]));
    unrounded += vf[i] != vb[i];
    ASSERT_NEAR(vf[i], 1.0f, 0.05f * kDummyNormalBound + 1e-6f);
  }
  EXPECT_GT(unrounded, 900);  // f32 keeps its bits
}

TEST_F(DummyWeightTest, RejectsBadArgumentsNamingTheTensor) {
  const auto expect_usage_error = [&](const DummyWeightParams& p) {
    try {
      ops.dummy_weight(p);
      FAIL() << "no error for " << p.name;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(p.name), std::string::npos) << e.what();
    }
  };
  expect_usage_error({"neg.weight", WeightFormat::kPlain, DType::kBF16, {-1, 4}, 0, 0.0f, 1.0f});
  expect_usage_error({"rank1.weight", WeightFormat::kFp8, DType::kBF16, {128}, 0, 0.0f, 1.0f});
  expect_usage_error({"int.weight", WeightFormat::kPlain, DType::kI32, {4}, 0, 0.0f, 1.0f});
  expect_usage_error({"nan.weight", WeightFormat::kPlain, DType::kF32, {4}, 0, 0.0f, NAN});
}

// The tiny preset with a small vocabulary, so building the model twice stays quick.
ModelConfig small_tiny() {
  ModelParams p = preset_config("tiny").params();
  p.vocab_size = 1024;
  return ModelConfig(p, "tiny with vocab 1024");
}

std::vector<float> last_logits(const Model& model, Ops& ops) {
  SequenceCache cache = model.new_sequence(ops, 16, false);
  ForwardBatch batch;
  batch.options.logits = LogitsFor::kLastTokenOfSequence;
  const std::vector<int32_t> ids = {5, 17, 900, 3, 64, 1000};
  batch.add(cache, ids);
  const ForwardResult r = model.forward(ops, batch);
  std::vector<float> out(static_cast<size_t>(r.logits.numel()));
  ops.download(r.logits.view(), host_view(out.data(), DType::kF32, r.logits.shape()));
  return out;
}

TEST_F(DummyWeightTest, AModelOfDummyWeightsRunsAndIsReproducible) {
  const Model a = Model::dummy(ops, small_tiny(), 1);
  const std::vector<float> la = last_logits(a, ops);
  ASSERT_EQ(la.size(), 1024u);
  double sum_sq = 0;
  for (float v : la) {
    ASSERT_TRUE(std::isfinite(v));
    sum_sq += static_cast<double>(v) * v;
  }
  EXPECT_GT(sum_sq, 0.0);
  const Model b = Model::dummy(ops, small_tiny(), 1);
  EXPECT_EQ(last_logits(b, ops), la);
  const Model c = Model::dummy(ops, small_tiny(), 2);
  EXPECT_NE(last_logits(c, ops), la);
}

// bench step's shared layers: a main layer takes the storage of the first main layer of its kind
// and routing (tiny: swa, csa, hca, csa, the swa layer hash-routed, then the MTP layer), nothing
// else is shared, and the model runs.
TEST_F(DummyWeightTest, SharedLayersShareStorageWithinAKindOnly) {
  const ModelConfig cfg = small_tiny();
  ASSERT_EQ(cfg.num_layers(), 4);
  const Model m = Model::dummy(ops, cfg, 1, true);
  const auto& L = m.weights().layers;
  const auto same = [](const Weight& a, const Weight& b) { return a.data.view().bytes() == b.data.view().bytes(); };
  EXPECT_TRUE(same(L[1].attn.wq_a, L[3].attn.wq_a));  // both csa, score-routed
  EXPECT_TRUE(same(L[1].ffn.experts.at(0).w1, L[3].ffn.experts.at(0).w1));
  EXPECT_FALSE(same(L[1].attn.wq_a, L[2].attn.wq_a));  // csa and hca
  EXPECT_FALSE(same(L[0].attn.wq_a, L[1].attn.wq_a));
  EXPECT_FALSE(same(L[1].attn.wq_a, L[1].attn.wkv));
  EXPECT_FALSE(same(m.weights().mtp.at(0).block.attn.wq_a, L[0].attn.wq_a));
  const Model unshared = Model::dummy(ops, cfg, 1);
  EXPECT_FALSE(same(unshared.weights().layers[1].attn.wq_a, unshared.weights().layers[3].attn.wq_a));
  for (float v : last_logits(m, ops)) ASSERT_TRUE(std::isfinite(v));
}

// The load's progress (what the tools print while weights load): after every tensor, counts that
// only grow and end at the totals, the bytes those of the tensors as stored.
TEST_F(DummyWeightTest, ProgressCountsEveryTensorUpToTheTotals) {
  std::vector<LoadProgress> seen;
  const Model m = Model::dummy(ops, small_tiny(), 1, false, [&](const LoadProgress& p) { seen.push_back(p); });
  ASSERT_FALSE(seen.empty());
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GT(seen[i].tensors_done, seen[i - 1].tensors_done);
    EXPECT_GT(seen[i].bytes_done, seen[i - 1].bytes_done);
  }
  const LoadProgress& last = seen.back();
  EXPECT_EQ(last.tensors_done, last.tensors_total);
  EXPECT_EQ(last.bytes_done, last.bytes_total);
  EXPECT_GT(last.bytes_total, uint64_t{1} << 20);  // the tiny model's weights: megabytes
}

}  // namespace
}  // namespace dsv4
