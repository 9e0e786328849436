// Helpers for the model tests: the tiny checkpoint the ctest fixture writes, forwards that return
// plain vectors, and an observer that keeps copies of the named tensors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
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

}  // namespace dsv4::testing
