// Helpers for the model tests: the tiny checkpoint the ctest fixture writes, forwards that return
// plain vectors, an observer that keeps copies of the named tensors, and MODEL.md §15's per-layer
// comparison of two implementations.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "cpu_test_util.h"
#include "model/model.h"

namespace dsv4::testing {

// Written by the make_tiny_model ctest fixture: `dsv4 make-model --preset tiny --seed 1`. A test
// binary carried to another machine (the GPU runs) finds it through DSV4_TINY_MODEL instead.
inline const char* tiny_model_dir() {
  const char* moved = std::getenv("DSV4_TINY_MODEL");
  return moved != nullptr ? moved : DSV4_TINY_MODEL_DIR;
}

// A test suite over one tiny model on a 2-thread CpuOps, loaded once for the suite. Base is
// ::testing::Test or a ::testing::TestWithParam<...>.
template <typename Base = ::testing::Test>
class CpuTinyModelSuite : public Base {
 protected:
  static void SetUpTestSuite() {
    ops_ = std::make_unique<cpu::CpuOps>(2);
    model_ = std::make_unique<Model>(Model::load(*ops_, tiny_model_dir()));
  }
  static void TearDownTestSuite() {
    model_.reset();
    ops_.reset();
  }
  static inline std::unique_ptr<cpu::CpuOps> ops_;
  static inline std::unique_ptr<Model> model_;
};

// Deterministic token ids spread over the vocabulary, with some repeats.
inline std::vector<int32_t> test_ids(int64_t n, int64_t vocab, uint32_t seed = 1) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& id : ids) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

class RecordingObserver : public ForwardObserver {
 public:
  void on_tensor(std::string_view name, ConstTensorView t) override {
    Record& r = records[std::string(name)];
    r.shape = t.shape();
    if (t.dtype() == DType::kI32) r.ints.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
    else r.floats = to_floats(t);
  }
  struct Record {
    Shape shape;
    std::vector<float> floats;
    std::vector<int32_t> ints;
  };
  std::map<std::string, Record> records;
};

// The last logits of every step of a fresh sequence on `ops` (host or device memory): `ids`
// prefilled, then `decode` single tokens ((7 step + 3) mod 100), with the forwards' MoE layers
// across `group` (null: none).
inline std::vector<float> sequence_logits(const Model& model, Ops& ops, const std::vector<int32_t>& ids, int64_t decode,
                                          bool exact, ExpertComm* group) {
  SequenceCache seq = model.new_sequence(ops, static_cast<int64_t>(ids.size()) + decode, exact);
  std::vector<float> logits;
  for (int64_t step = 0; step <= decode; ++step) {
    const std::vector<int32_t> chunk = step == 0 ? ids : std::vector<int32_t>{static_cast<int32_t>((7 * step + 3) % 100)};
    ForwardBatch batch;
    batch.options.exact_math = exact;
    batch.options.logits = LogitsFor::kLastTokenOfSequence;
    batch.options.expert_group = group;
    batch.add(seq, chunk);
    const DeviceTensor step_logits = model.forward(ops, batch).logits;
    Tensor host(step_logits.dtype(), step_logits.shape());
    ops.download(step_logits.view(), host.view());
    const std::vector<float> l = to_floats(host.view());
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

// The final hidden rows [n, D] of a forward of `ids` on `cache` (no logits: they are a
// row-independent product of these rows).
inline std::vector<float> forward_hidden(const Model& model, Ops& ops, SequenceCache& cache, std::span<const int32_t> ids,
                                         bool exact = false, ForwardObserver* observer = nullptr) {
  ForwardBatch batch;
  batch.options.exact_math = exact;
  batch.options.logits = LogitsFor::kNone;
  batch.observer = observer;
  batch.add(cache, ids);
  return to_floats(model.forward(ops, batch).final_hidden.view());
}

inline double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline std::vector<float> rows(const std::vector<float>& v, int64_t width, int64_t begin, int64_t end) {
  return {v.begin() + begin * width, v.begin() + end * width};
}

// One layer's output under test against a reference's, fed the same input (MODEL.md §15): the
// tokens whose expert set or indexer top-k set differs are counted, and the relative error of the
// output rows is taken over the other tokens.
struct LayerAgreement {
  int64_t tokens = 0;
  int64_t expert_flips = 0;    // tokens whose expert set differs
  int64_t topk_flips = 0;      // tokens whose top-k set differs
  int64_t either = 0;          // tokens with either
  double set_error = 0;        // relative Frobenius error over the agreeing tokens
  double token_median = 0;     // median of the agreeing tokens' relative errors
  double token_worst = 0;
  double mismatch() const { return tokens > 0 ? double(either) / tokens : 0; }
};

// out/ref: [tokens, width]; experts: [tokens, k]; topk: [tokens, kt] or empty (no indexer). The
// reference's ids may be another integer type (goldens hold i64).
template <typename RefInt>
LayerAgreement layer_agreement(const std::vector<float>& out, const std::vector<float>& ref, int64_t tokens,
                               int64_t width, const std::vector<int32_t>& experts,
                               const std::vector<RefInt>& ref_experts, int64_t k, const std::vector<int32_t>& topk,
                               const std::vector<RefInt>& ref_topk, int64_t kt) {
  LayerAgreement a;
  a.tokens = tokens;
  double err2 = 0, ref2 = 0;
  std::vector<double> per_token;
  for (int64_t t = 0; t < tokens; ++t) {
    const bool experts_differ = !std::equal(experts.begin() + t * k, experts.begin() + (t + 1) * k, ref_experts.begin() + t * k);
    const bool topk_differs =
        kt > 0 && !std::equal(topk.begin() + t * kt, topk.begin() + (t + 1) * kt, ref_topk.begin() + t * kt);
    a.expert_flips += experts_differ;
    a.topk_flips += topk_differs;
    a.either += experts_differ || topk_differs;
    if (experts_differ || topk_differs) continue;
    double e2 = 0, r2 = 0;
    for (int64_t i = t * width; i < (t + 1) * width; ++i) {
      e2 += double(out[i] - ref[i]) * (out[i] - ref[i]);
      r2 += double(ref[i]) * ref[i];
    }
    err2 += e2;
    ref2 += r2;
    per_token.push_back(std::sqrt(e2 / r2));
    a.token_worst = std::max(a.token_worst, per_token.back());
  }
  a.set_error = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
  a.token_median = per_token.empty() ? 0 : median(per_token);
  return a;
}

inline void print_layer_agreement(const char* prefix, int64_t layer, std::string_view kind, const LayerAgreement& a) {
  std::printf("%slayer %lld (%s): expert sets differ %lld/%lld, top-k sets differ %lld/%lld; rel. error over the "
              "agreeing tokens %.3e, per token median %.3e max %.3e\n",
              prefix, static_cast<long long>(layer), std::string(kind).c_str(), static_cast<long long>(a.expert_flips),
              static_cast<long long>(a.tokens), static_cast<long long>(a.topk_flips), static_cast<long long>(a.tokens),
              a.set_error, a.token_median, a.token_worst);
}

}  // namespace dsv4::testing
