// The tiny model on the GPU with the attention layer's chains on side streams (multi-stream on,
// and auto with a threshold that the prefill crosses and the decode does not) against the same
// model with them in order on one stream: the logits must be bit-identical (memcmp) for a long
// prefill, decode steps, and a batch of three sequences. Skips where no GPU exists.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "model_test_util.h"

namespace dsv4::testing {
namespace {

struct Scenario {
  int64_t prompt = 0;                  // one sequence's prefill, then `decode` single-token steps
  int64_t decode = 0;
  std::vector<int64_t> batch_prompts;  // then these sequences prefilled in one batch, then `decode` batched steps
  bool exact = false;
};

std::vector<float> logits_of(Ops& ops, const ForwardResult& r) {
  Tensor host(DType::kF32, r.logits.shape());
  ops.download(r.logits.view(), host.view());
  return to_floats(host.view());
}

// Every logit the scenario produces, in order.
std::vector<float> run_scenario(const Model& model, Ops& ops, const Scenario& sc) {
  const int64_t V = model.config()->vocab_size;
  std::vector<float> all;
  const auto forward = [&](ForwardBatch& batch) {
    batch.options.exact_math = sc.exact;
    batch.options.logits = LogitsFor::kAllTokens;
    const std::vector<float> l = logits_of(ops, model.forward(ops, batch));
    all.insert(all.end(), l.begin(), l.end());
  };

  const std::vector<int32_t> ids = test_ids(sc.prompt + sc.decode, V, 21);
  SequenceCache single = model.new_sequence(ops, sc.prompt + sc.decode, sc.exact);
  ForwardBatch prefill;
  prefill.add(single, std::span(ids).first(static_cast<size_t>(sc.prompt)));
  forward(prefill);
  for (int64_t s = 0; s < sc.decode; ++s) {
    ForwardBatch step;
    step.add(single, std::span(ids).subspan(static_cast<size_t>(sc.prompt + s), 1));
    forward(step);
  }

  std::vector<std::vector<int32_t>> seq_ids;
  std::vector<SequenceCache> caches;
  for (size_t i = 0; i < sc.batch_prompts.size(); ++i) {
    seq_ids.push_back(test_ids(sc.batch_prompts[i] + sc.decode, V, 30 + static_cast<uint32_t>(i)));
    caches.push_back(model.new_sequence(ops, sc.batch_prompts[i] + sc.decode, sc.exact));
  }
  if (caches.empty()) return all;
  ForwardBatch batch;
  for (size_t i = 0; i < caches.size(); ++i)
    batch.add(caches[i], std::span(seq_ids[i]).first(static_cast<size_t>(sc.batch_prompts[i])));
  forward(batch);
  for (int64_t s = 0; s < sc.decode; ++s) {
    ForwardBatch step;
    for (size_t i = 0; i < caches.size(); ++i)
      step.add(caches[i], std::span(seq_ids[i]).subspan(static_cast<size_t>(sc.batch_prompts[i] + s), 1));
    forward(step);
  }
  return all;
}

// Runs the scenario with multi-stream off, on, and auto (side streams up to 64 tokens) on
// backends made with `base` options, and requires the same bytes from all three.
void expect_bit_identical(cuda::CudaOptions base, const Scenario& sc) {
  std::vector<std::vector<float>> results;
  for (const MultiStreamMode mode : {MultiStreamMode::kOff, MultiStreamMode::kOn, MultiStreamMode::kAuto}) {
    cuda::CudaOptions options = base;
    options.multi_stream.mode = mode;
    options.multi_stream.auto_max_tokens = 64;
    cuda::CudaOps ops(options);
    const Model model = Model::load(ops, tiny_model_dir());
    results.push_back(run_scenario(model, ops, sc));
  }
  const std::vector<float>& off = results[0];
  ASSERT_FALSE(off.empty());
  for (size_t m = 1; m < results.size(); ++m) {
    const char* mode = m == 1 ? "on" : "auto";
    ASSERT_EQ(results[m].size(), off.size()) << mode;
    const bool same = std::memcmp(results[m].data(), off.data(), off.size() * sizeof(float)) == 0;
    if (!same) {
      size_t i = 0;
      while (std::memcmp(&results[m][i], &off[i], sizeof(float)) == 0) ++i;
      ADD_FAILURE() << "multi-stream " << mode << ": logit " << i << " of " << off.size() << " is " << results[m][i]
                    << ", multi-stream off gives " << off[i];
    }
  }
}

class MultiStreamModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device on this machine";
  }
  static cuda::CudaOptions with_fp8_gemm(cuda::Fp8Gemm gemm) {
    cuda::CudaOptions o;
    o.fp8_gemm = gemm;
    return o;
  }
  // A prefill across C4 and C128 block boundaries, decode steps, a batch of three.
  static Scenario full() { return {300, 3, {200, 77, 130}, false}; }
};

TEST_F(MultiStreamModel, LogitsBitIdenticalToOneStream) { expect_bit_identical({}, full()); }

TEST_F(MultiStreamModel, LogitsBitIdenticalToOneStreamOnCudaCores) {
  expect_bit_identical(with_fp8_gemm(cuda::Fp8Gemm::kSimple), full());
}

TEST_F(MultiStreamModel, LogitsBitIdenticalToOneStreamOnCublasLt) {
  expect_bit_identical(with_fp8_gemm(cuda::Fp8Gemm::kCublasLt), full());
}

TEST_F(MultiStreamModel, LogitsBitIdenticalToOneStreamExactMath) {
  Scenario sc = full();
  sc.exact = true;
  expect_bit_identical(with_fp8_gemm(cuda::Fp8Gemm::kSimple), sc);
}

// Small enough for compute-sanitizer's racecheck and synccheck (scripts/gpu_run.sh): one C128
// block, two decode steps, a batch of two.
TEST_F(MultiStreamModel, ShortRunBitIdenticalToOneStream) {
  expect_bit_identical({}, {130, 2, {9, 40}, false});
}

}  // namespace
}  // namespace dsv4::testing
