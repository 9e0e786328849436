// Invariants of the CPU reference forward on the tiny checkpoint (MODEL.md §13-15), bit for bit:
// chunked prefill equals one-shot prefill; prefill(n) then decode equals prefill(n + k) at every
// position (across the C4 and C128 block boundaries); a batch of sequences equals each alone;
// every prompt length of §13 equals the prefix of a longer prefill; the thread count changes
// nothing. Plus the routing invariants (hash layers route by token id, the bias selects but does
// not weigh), the MTP module's consistency, and that the caches hold values the 584-byte FP8
// cache layout stores exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "core/error.h"
#include "core/quant.h"
#include "kv/fp8_cache_layout.h"
#include "loader/safetensors.h"
#include "model_test_util.h"

namespace dsv4::testing {
namespace {

class TinyModel : public CpuTinyModelSuite<> {
 protected:
  const Model& model() const { return *model_; }
  Ops& ops() const { return *ops_; }
  int64_t D() const { return model().config()->hidden_size; }
  int64_t V() const { return model().config()->vocab_size; }
  SequenceCache fresh(int64_t capacity, bool exact = false) const { return model().new_sequence(ops(), capacity, exact); }
};

TEST_F(TinyModel, ChunkedPrefillEqualsOneShotPrefill) {
  const std::vector<int32_t> ids = test_ids(300, V());
  SequenceCache one = fresh(300);
  const std::vector<float> ref = forward_hidden(model(), ops(), one, ids);
  for (int64_t chunk : {100, 37}) {
    SequenceCache c = fresh(300);
    std::vector<float> got;
    for (int64_t b = 0; b < 300; b += chunk) {
      const std::vector<float> h = forward_hidden(model(), ops(), c, std::span(ids).subspan(b, std::min<int64_t>(chunk, 300 - b)));
      got.insert(got.end(), h.begin(), h.end());
    }
    EXPECT_TRUE(same_bits(got, ref)) << "chunks of " << chunk;
  }
}

TEST_F(TinyModel, PrefillThenDecodeEqualsTheLongerPrefillAtEveryPosition) {
  // Prefill 130, then 140 decode steps: C4 boundaries every 4 steps, C128 at p = 255, the SWA
  // ring rolls over and the overlap state shifts (MODEL.md §13).
  const int64_t n = 130, k = 140;
  const std::vector<int32_t> ids = test_ids(n + k, V(), 2);
  SequenceCache one = fresh(n + k);
  const std::vector<float> ref = forward_hidden(model(), ops(), one, ids);
  SequenceCache c = fresh(n + k);
  std::vector<float> got = forward_hidden(model(), ops(), c, std::span(ids).first(n));
  for (int64_t i = n; i < n + k; ++i) {
    const std::vector<float> h = forward_hidden(model(), ops(), c, std::span(ids).subspan(i, 1));
    got.insert(got.end(), h.begin(), h.end());
  }
  EXPECT_TRUE(same_bits(got, ref));
}

TEST_F(TinyModel, EveryPromptLengthEqualsThePrefixOfALongerPrefill) {
  const std::vector<int32_t> ids = test_ids(300, V(), 3);
  SequenceCache full = fresh(300);
  const std::vector<float> ref = forward_hidden(model(), ops(), full, ids);
  for (int64_t n : {1, 3, 4, 5, 127, 128, 129, 255, 256}) {
    SequenceCache c = fresh(n);
    EXPECT_TRUE(same_bits(forward_hidden(model(), ops(), c, std::span(ids).first(n)), rows(ref, D(), 0, n)))
        << "prompt length " << n;
  }
}

TEST_F(TinyModel, ABatchOfSequencesEqualsEachSequenceAlone) {
  // Three sequences in different states: one continuing after a prefill of 200 (crossing a C128
  // block), one starting fresh, one decoding a single token after 67.
  const std::vector<int32_t> a = test_ids(230, V(), 4), b = test_ids(45, V(), 5), c = test_ids(68, V(), 6);
  auto alone = [&](const std::vector<int32_t>& ids, int64_t before) {
    SequenceCache s = fresh(static_cast<int64_t>(ids.size()));
    if (before > 0) forward_hidden(model(), ops(), s, std::span(ids).first(before));
    return forward_hidden(model(), ops(), s, std::span(ids).subspan(before));
  };
  const std::vector<float> ra = alone(a, 200), rb = alone(b, 0), rc = alone(c, 67);

  SequenceCache sa = fresh(230), sb = fresh(45), sc = fresh(68);
  forward_hidden(model(), ops(), sa, std::span(a).first(200));
  forward_hidden(model(), ops(), sc, std::span(c).first(67));
  ForwardBatch batch;
  batch.options.logits = LogitsFor::kNone;
  batch.add(sa, std::span(a).subspan(200));
  batch.add(sb, b);
  batch.add(sc, std::span(c).subspan(67));
  const std::vector<float> got = to_floats(model().forward(ops(), batch).final_hidden.view());
  EXPECT_TRUE(same_bits(rows(got, D(), 0, 30), ra));
  EXPECT_TRUE(same_bits(rows(got, D(), 30, 75), rb));
  EXPECT_TRUE(same_bits(rows(got, D(), 75, 76), rc));
  EXPECT_EQ(sa.length(), 230);
  EXPECT_EQ(sb.length(), 45);
  EXPECT_EQ(sc.length(), 68);
}

TEST_F(TinyModel, LogitsOfTheLastTokenAreRowsOfTheFullLogits) {
  const std::vector<int32_t> ids = test_ids(20, V(), 7);
  SequenceCache c1 = fresh(20), c2 = fresh(20);
  ForwardBatch all;
  all.add(c1, ids);
  const std::vector<float> full = to_floats(model().forward(ops(), all).logits.view());
  ForwardBatch last;
  last.options.logits = LogitsFor::kLastTokenOfSequence;
  last.add(c2, ids);
  const ForwardResult r = model().forward(ops(), last);
  ASSERT_EQ(r.logits.shape(), (Shape{1, V()}));
  EXPECT_TRUE(same_bits(to_floats(r.logits.view()), rows(full, V(), 19, 20)));
  for (float v : full) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(TinyModel, ExactMathIsItsOwnModeAndKeepsTheInvariants) {
  const std::vector<int32_t> ids = test_ids(70, V(), 8);
  SequenceCache one = fresh(70, true), chunked = fresh(70, true), quantised = fresh(70);
  const std::vector<float> ref = forward_hidden(model(), ops(), one, ids, true);
  std::vector<float> got = forward_hidden(model(), ops(), chunked, std::span(ids).first(33), true);
  const std::vector<float> rest = forward_hidden(model(), ops(), chunked, std::span(ids).subspan(33), true);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_TRUE(same_bits(got, ref));
  // Close to the default mode, but not equal (no quantisation, no bf16 rounding).
  const std::vector<float> dflt = forward_hidden(model(), ops(), quantised, ids);
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    dot += double(ref[i]) * dflt[i];
    na += double(ref[i]) * ref[i];
    nb += double(dflt[i]) * dflt[i];
  }
  EXPECT_GT(dot / std::sqrt(na * nb), 0.9);
  EXPECT_FALSE(same_bits(ref, dflt));
  // A default-mode cache cannot serve an exact-math forward.
  ForwardBatch wrong;
  wrong.options.exact_math = true;
  SequenceCache bf16 = fresh(4);
  wrong.add(bf16, std::span(ids).first(4));
  EXPECT_THROW(model().forward(ops(), wrong), UsageError);
}

TEST_F(TinyModel, ThreadCountChangesNoBit) {
  const std::vector<int32_t> ids = test_ids(90, V(), 9);
  SequenceCache c2 = fresh(90);
  const std::vector<float> two = forward_hidden(model(), ops(), c2, ids);
  cpu::CpuOps single(1);
  const Model m1 = Model::load(single, tiny_model_dir());
  SequenceCache c1 = m1.new_sequence(single, 90, false);
  EXPECT_TRUE(same_bits(forward_hidden(m1, single, c1, ids), two));
}

TEST_F(TinyModel, HashLayersRouteByTokenId) {
  const ModelConfig& cfg = model().config();
  ASSERT_GE(cfg->num_hash_layers, 1);
  const int64_t k = cfg->num_experts_per_tok;
  std::vector<int32_t> ids = test_ids(40, V(), 10);
  ids[30] = ids[3];  // the same token in another context
  ids[31] = ids[3];
  RecordingObserver obs;
  SequenceCache c = fresh(40);
  forward_hidden(model(), ops(), c, ids, false, &obs);
  const std::vector<int32_t>& experts = obs.records.at("layers.0.experts").ints;
  const ConstTensorView table = model().weights().layers[0].ffn.tid2eid->data.view();
  for (int64_t t = 0; t < 40; ++t) {
    std::vector<int32_t> want(table.data<int32_t>() + ids[t] * k, table.data<int32_t>() + (ids[t] + 1) * k);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(std::vector<int32_t>(experts.begin() + t * k, experts.begin() + (t + 1) * k), want) << "token " << t;
  }
  // Score-routed layers do not follow the table.
  EXPECT_FALSE(cfg.is_hash_layer(1));
  EXPECT_NE(obs.records.at("layers.1.experts").ints, experts);
}

TEST_F(TinyModel, RoutingBiasSelectsExpertsButDoesNotWeighThem) {
  // Reload with layer 1's bias shifted: by a constant (same choice, same weights, bit for bit),
  // and with one expert boosted (chosen by every token; weights still the normalised scores).
  const ModelConfig& cfg = model().config();
  const int64_t k = cfg->num_experts_per_tok, E = cfg->n_routed_experts;
  const std::vector<int32_t> ids = test_ids(50, V(), 11);
  auto routing = [&](const std::function<void(float*)>& edit) {
    const Checkpoint ckpt(tiny_model_dir());
    ModelWeights w = load_model_weights(ops(), cfg, ckpt);
    edit(w.layers[1].ffn.bias->data.view().data<float>());
    const Model m(ops(), cfg, std::move(w));
    RecordingObserver obs;
    SequenceCache c = m.new_sequence(ops(), 50, false);
    forward_hidden(m, ops(), c, ids, false, &obs);
    return std::make_pair(obs.records.at("layers.1.experts").ints, obs.records.at("layers.1.expert_weights").floats);
  };
  const auto [e0, w0] = routing([](float*) {});
  const auto [e1, w1] = routing([&](float* b) { for (int64_t e = 0; e < E; ++e) b[e] += 0.25f; });
  EXPECT_EQ(e1, e0);
  EXPECT_TRUE(same_bits(w1, w0));
  const int32_t boosted = static_cast<int32_t>(E - 1);
  const auto [e2, w2] = routing([&](float* b) { b[boosted] += 1e6f; });
  for (int64_t t = 0; t < 50; ++t) {
    EXPECT_NE(std::find(e2.begin() + t * k, e2.begin() + (t + 1) * k, boosted), e2.begin() + (t + 1) * k) << t;
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_GT(w2[t * k + i], 0.0f);
      EXPECT_LT(w2[t * k + i], cfg->routed_scaling_factor);  // not dominated by the 1e6 bias
      sum += w2[t * k + i];
    }
    EXPECT_NEAR(sum, cfg->routed_scaling_factor, 1e-5);
  }
  EXPECT_NE(e2, e0);
}

TEST_F(TinyModel, MtpForwardIsFiniteAndChunkInvariant) {
  const int64_t T = 60;
  const std::vector<int32_t> ids = test_ids(T + 1, V(), 12);
  SequenceCache c = fresh(T + 1);
  ForwardBatch main;
  main.options.logits = LogitsFor::kNone;
  main.add(c, std::span(ids).first(T));
  const ForwardResult r = model().forward(ops(), main);

  // One shot: positions 0..T-1 fed the streams there and the next ids.
  ForwardBatch mtp;
  mtp.add(c, std::span(ids).subspan(1, T), c.mtp_length());
  const ForwardResult one = model().forward_mtp(ops(), mtp, r.streams);
  ASSERT_EQ(one.logits.shape(), (Shape{T, V()}));
  for (float v : to_floats(one.logits.view())) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(c.mtp_length(), T);

  // The same in two chunks on a fresh sequence's MTP state.
  SequenceCache c2 = fresh(T + 1);
  const int64_t n = r.streams.dim(1), width = n * D();
  const std::vector<float> streams = to_floats(r.streams.view());
  std::vector<float> got;
  for (const auto& [b, e] : {std::pair<int64_t, int64_t>{0, 25}, {25, T}}) {
    DeviceTensor part = ops().alloc(r.streams.dtype(), {e - b, n, D()});
    ops().copy({slice_rows(r.streams.view(), b, e), part.view()});
    ForwardBatch chunk;
    chunk.options.logits = LogitsFor::kNone;
    chunk.add(c2, std::span(ids).subspan(1 + b, e - b), c2.mtp_length());
    const std::vector<float> h = to_floats(model().forward_mtp(ops(), chunk, part).final_hidden.view());
    got.insert(got.end(), h.begin(), h.end());
  }
  EXPECT_TRUE(same_bits(got, to_floats(one.final_hidden.view())));
  EXPECT_EQ(streams.size(), static_cast<size_t>(T * width));
}

// Every kv row the model caches (window rows and compressed entries) is already what the paged
// FP8 layout (MODEL.md §8.1) would store: its 448 nope dims survive a second e4m3 round trip with
// pow2 scales per 64 unchanged, and the 64 rope dims are bf16. So moving the caches to that layout
// changes no number.
TEST_F(TinyModel, CachedKvRowsAreExactlyRepresentableInTheFp8CacheLayout) {
  const std::vector<int32_t> ids = test_ids(300, V());
  SequenceCache seq = fresh(300);
  forward_hidden(model(), ops(), seq, ids);
  using L = Fp8CacheLayout;
  int64_t rows_checked = 0;
  for (int64_t l = 0; l < model().config().num_layers(); ++l) {
    // The window ring and the compressed pool's rows (a pool of this sequence's own: every row
    // is one of its entries).
    const DeviceTensor& pool = seq.pool().compressed(l);
    const DeviceTensor rows = pool.empty() ? DeviceTensor() : pool.reshaped({pool.dim(0) * pool.dim(1), pool.dim(2)});
    for (const DeviceTensor* cache_of : {static_cast<const DeviceTensor*>(&seq.layer(l).window), &rows}) {
      if (cache_of->empty()) continue;
      const DeviceTensor& cache = *cache_of;
      ASSERT_EQ(cache.dim(1), L::kHeadDim);
      ASSERT_EQ(cache.dtype(), DType::kBF16);
      const uint16_t* bits = cache.view().data<uint16_t>();
      for (int64_t r = 0; r < cache.dim(0); ++r) {
        float nope[L::kNopeDim];
        for (int i = 0; i < L::kNopeDim; ++i) nope[i] = bf16_to_float(bits[r * L::kHeadDim + i]);
        float again[L::kNopeDim];
        std::copy(nope, nope + L::kNopeDim, again);
        for (int b = 0; b < L::kNopeDim; b += L::kQuantBlock) fake_quant_block_e4m3(again + b, L::kQuantBlock);
        for (int i = 0; i < L::kNopeDim; ++i)
          ASSERT_EQ(float_bits(again[i]), float_bits(nope[i])) << "layer " << l << " row " << r << " dim " << i;
        ++rows_checked;
      }
    }
  }
  EXPECT_GT(rows_checked, 128);  // window rows of every layer plus compressed entries
}

}  // namespace
}  // namespace dsv4::testing
