// Synthetic weights: the counter-based generator is order-independent and normal, every tensor is
// valid in its stored format and scaled as documented, and whole written checkpoints are complete
// and byte-identical for a seed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>
#include <set>

#include "config/presets.h"
#include "core/error.h"
#include "core/numeric.h"
#include "loader/safetensors.h"
#include "loader/synthetic_checkpoint.h"
#include "loader/synthetic_weights.h"
#include "loader/weights.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// The tiny preset with a 1024-token vocabulary, so whole checkpoints are quick to make.
ModelConfig small_tiny() {
  ModelParams p = preset_config("tiny").params();
  p.vocab_size = 1024;
  return ModelConfig(p, "tiny with vocab 1024");
}

TEST(CounterRng, ValuesDependOnlyOnSeedNameAndIndex) {
  const CounterRng a(7, "layers.0.attn.wq_a.weight");
  const CounterRng b(7, "layers.0.attn.wq_a.weight");
  const CounterRng other_name(7, "layers.0.attn.wq_b.weight");
  const CounterRng other_seed(8, "layers.0.attn.wq_a.weight");
  EXPECT_EQ(a.bits(12345), b.bits(12345));
  EXPECT_NE(a.bits(12345), other_name.bits(12345));
  EXPECT_NE(a.bits(12345), other_seed.bits(12345));
  std::vector<float> whole(101);
  a.fill_normal(0, whole);
  for (uint64_t first : {1u, 2u, 37u}) {  // odd and even starts: pieces equal slices of the whole
    std::vector<float> piece(101 - first);
    b.fill_normal(first, piece);
    for (size_t i = 0; i < piece.size(); ++i) ASSERT_EQ(piece[i], whole[first + i]) << first << " " << i;
  }
}

TEST(CounterRng, BoxMullerMatchesLibmAndIsStandardNormal) {
  const CounterRng rng(1, "x");
  const size_t n = 200000;
  std::vector<float> z(n);
  rng.fill_normal(0, z);
  double sum = 0;
  double sum2 = 0;
  size_t beyond3 = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += z[i];
    sum2 += static_cast<double>(z[i]) * z[i];
    beyond3 += std::fabs(z[i]) > 3.0f;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(beyond3) / n, 0.0027, 0.0006);
  // The portable ln / cos / sin agree with the C library to float precision.
  for (size_t pair = 0; pair < 1000; ++pair) {
    const double r = std::sqrt(-2.0 * std::log(rng.uniform(2 * pair)));
    const double t = 2.0 * std::numbers::pi * rng.uniform(2 * pair + 1);
    EXPECT_NEAR(z[2 * pair], r * std::cos(t), 1e-6 * (1 + r));
    EXPECT_NEAR(z[2 * pair + 1], r * std::sin(t), 1e-6 * (1 + r));
  }
}

TEST(CounterRng, UniformIsInsideTheOpenInterval) {
  const CounterRng rng(0, "");
  for (uint64_t k = 0; k < 10000; ++k) {
    const double u = rng.uniform(k);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

// Root mean square of the dequantised weight.
double rms(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(SynthesizeTensor, EveryTensorIsValidInItsFormat) {
  const ModelConfig cfg = small_tiny();
  const std::vector<ExpectedTensor> list = expected_tensors(cfg);
  for (size_t i = 0; i < list.size(); ++i) {
    const ExpectedTensor& e = list[i];
    SCOPED_TRACE(e.spec.name);
    const SyntheticTensor t = synthesize_tensor(cfg, e, 3);
    ASSERT_EQ(t.data.dtype(), e.spec.dtype);
    ASSERT_EQ(t.data.shape(), e.spec.shape);
    if (e.format == WeightFormat::kPlain) {
      ASSERT_FALSE(t.scale.has_value());
    } else {
      ASSERT_TRUE(t.scale.has_value());
      const TensorSpec& scale_spec = list.at(++i).spec;
      ASSERT_EQ(t.scale->dtype(), scale_spec.dtype);
      ASSERT_EQ(t.scale->shape(), scale_spec.shape);
      // Scales are powers of two near the weights' size: 2^-16 .. 2^0, never NaN (0xFF).
      for (uint8_t s : t.scale->span<uint8_t>()) {
        ASSERT_GE(s, 127 - 16);
        ASSERT_LE(s, 127);
      }
      const int64_t in = e.format == WeightFormat::kFp8 ? e.spec.shape[1] : 2 * e.spec.shape[1];
      std::vector<float> w(static_cast<size_t>(e.spec.shape[0] * in));
      if (e.format == WeightFormat::kFp8) {
        for (uint8_t c : t.data.span<uint8_t>()) ASSERT_NE(c & 0x7f, 0x7f) << "NaN code";
        dequant_fp8_block(t.data.view(), t.scale->view(), w, e.spec.name);
      } else {
        dequant_mxfp4(t.data.view(), t.scale->view(), w, e.spec.name);
        // DeepSeek's FP8 cast must be lossless on these weights (scales within 2^6 per tile).
        EXPECT_NO_THROW(cast_mxfp4_to_fp8(t.data.view(), t.scale->view(), e.spec.name));
      }
      for (float x : w) ASSERT_TRUE(std::isfinite(x));
      // N(0, 1/in) before quantisation; FP4 rounding moves the RMS by a few per cent.
      EXPECT_NEAR(rms(w) * std::sqrt(static_cast<double>(in)), 1.0, 0.12);
      continue;
    }
    if (e.spec.dtype == DType::kI64) {  // tid2eid: k distinct experts per token id
      const int64_t k = e.spec.shape[1];
      const auto ids = t.data.span<int64_t>();
      std::set<int64_t> used;
      for (int64_t row = 0; row < e.spec.shape[0]; ++row) {
        std::set<int64_t> distinct;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t id = ids[static_cast<size_t>(row * k + j)];
          ASSERT_GE(id, 0);
          ASSERT_LT(id, cfg->n_routed_experts);
          distinct.insert(id);
          used.insert(id);
        }
        ASSERT_EQ(distinct.size(), static_cast<size_t>(k)) << "row " << row;
      }
      EXPECT_EQ(used.size(), static_cast<size_t>(cfg->n_routed_experts));
      continue;
    }
    std::vector<float> v;
    if (e.spec.dtype == DType::kBF16)
      for (uint16_t b : t.data.span<uint16_t>()) v.push_back(bf16_to_float(b));
    else
      for (float f : t.data.span<float>()) v.push_back(f);
    for (float x : v) ASSERT_TRUE(std::isfinite(x));
    if (e.spec.name.ends_with("norm.weight")) {
      for (float x : v) ASSERT_NEAR(x, 1.0f, 0.3f);
    }
  }
}

TEST(SynthesizeTensor, ScalesFollowTheDocumentedRecipes) {
  const ModelConfig cfg = small_tiny();
  const auto list = expected_tensors(cfg);
  auto values = [&](const std::string& name) {
    for (const ExpectedTensor& e : list)
      if (e.spec.name == name) {
        const SyntheticTensor t = synthesize_tensor(cfg, e, 11);
        std::vector<float> v;
        if (t.data.dtype() == DType::kBF16)
          for (uint16_t b : t.data.span<uint16_t>()) v.push_back(bf16_to_float(b));
        else
          for (float f : t.data.span<float>()) v.push_back(f);
        return v;
      }
    ADD_FAILURE() << name << " not expected";
    return std::vector<float>{};
  };
  EXPECT_NEAR(rms(values("embed.weight")), 1.0, 0.02);
  EXPECT_NEAR(rms(values("head.weight")) * std::sqrt(512.0), 1.0, 0.02);
  EXPECT_NEAR(rms(values("layers.1.hc_attn_fn")) * std::sqrt(4.0 * 512), 1.0, 0.05);
  EXPECT_NEAR(rms(values("layers.1.attn.compressor.wkv.weight")) * std::sqrt(512.0), 1.0, 0.02);
  // hc base: pre part near ln(1/3), post part near 0, comb diagonal near 1 (MODEL.md §2.4).
  const std::vector<float> base = values("layers.2.hc_ffn_base");
  ASSERT_EQ(base.size(), 24u);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(base[j], std::log(1.0 / 3.0), 0.5);
  for (int j = 4; j < 8; ++j) EXPECT_NEAR(base[j], 0.0, 0.5);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(base[8 + i * 4 + i], 1.0, 0.5);
  for (float s : values("layers.2.hc_ffn_scale")) EXPECT_NEAR(s, 0.5, 0.3);
  for (float b : values("layers.3.ffn.gate.bias")) EXPECT_LT(std::fabs(b), 0.2f);
}

TEST(SynthesizeTensor, DeterministicPerSeed) {
  const ModelConfig cfg = small_tiny();
  const auto list = expected_tensors(cfg);
  for (const ExpectedTensor* e : {&list[0], &list[10], &list[12]}) {
    const SyntheticTensor a = synthesize_tensor(cfg, *e, 5);
    const SyntheticTensor b = synthesize_tensor(cfg, *e, 5);
    const SyntheticTensor c = synthesize_tensor(cfg, *e, 6);
    const auto bytes = [](const Tensor& t) {
      const auto* p = t.data<uint8_t>();
      return std::vector<uint8_t>(p, p + t.nbytes());
    };
    EXPECT_EQ(bytes(a.data), bytes(b.data)) << e->spec.name;
    EXPECT_NE(bytes(a.data), bytes(c.data)) << e->spec.name;
  }
  ExpectedTensor scale = list[0];
  scale.spec.dtype = DType::kF8E8M0;
  EXPECT_THROW(synthesize_tensor(cfg, scale, 0), UsageError);
}

// A fresh folder under the temp dir, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::temp_directory_path() / ("dsv4-test-" + tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SyntheticCheckpoint, WritesACompleteShardedCheckpoint) {
  const ModelConfig cfg = small_tiny();
  TempDir dir("ckpt");
  size_t calls = 0;
  WriteProgress last;
  SyntheticCheckpointOptions options;
  options.seed = 9;
  options.max_shard_bytes = 4 << 20;
  options.progress = [&](const WriteProgress& p) {
    ++calls;
    last = p;
  };
  const SyntheticCheckpointSummary summary = write_synthetic_checkpoint(cfg, dir.path(), options);
  const auto list = expected_tensors(cfg);
  EXPECT_EQ(summary.tensors, list.size());
  EXPECT_EQ(summary.bytes, expected_checkpoint_bytes(cfg));
  EXPECT_GT(summary.shards, 2u);
  EXPECT_EQ(calls, list.size());
  EXPECT_EQ(last.tensors_done, last.tensors_total);
  EXPECT_EQ(last.bytes_done, last.bytes_total);

  const Checkpoint ckpt(dir.path());
  const CheckpointCheck check = check_checkpoint(cfg, ckpt);
  EXPECT_TRUE(check.ok());
  EXPECT_TRUE(check.unexpected.empty());
  // Stored bytes are the synthesised ones.
  for (const std::string name : {"layers.0.ffn.gate.tid2eid", "mtp.0.e_proj.weight", "mtp.0.e_proj.scale",
                                 "layers.1.ffn.experts.2.w2.scale"}) {
    size_t i = 0;
    while (list[i].spec.name != name) ++i;
    const bool is_scale = list[i].spec.dtype == DType::kF8E8M0;
    const SyntheticTensor t = synthesize_tensor(cfg, list[is_scale ? i - 1 : i], 9);
    const Tensor& want = is_scale ? *t.scale : t.data;
    const ConstTensorView got = ckpt.get(name);
    ASSERT_EQ(got.nbytes(), want.nbytes());
    EXPECT_EQ(std::memcmp(got.bytes(), want.data<std::byte>(), want.nbytes()), 0) << name;
  }
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_NE(entry.path().extension(), ".partial") << entry.path();
}

// A checkpoint made for one config, checked against configs that differ from it.
TEST(SyntheticCheckpoint, CheckFindsMissingWrongAndUnexpectedTensors) {
  const ModelConfig cfg = small_tiny();
  TempDir dir("check");
  SyntheticCheckpointOptions options;
  options.max_shard_bytes = 8 << 20;
  write_synthetic_checkpoint(cfg, dir.path(), options);
  const Checkpoint ckpt(dir.path());

  ModelParams p = cfg.params();
  p.expert_dtype = ExpertDType::kFp8;  // FP8 experts expected, MXFP4 found
  const CheckpointCheck fp8 = check_checkpoint(ModelConfig(p, "fp8 experts"), ckpt);
  EXPECT_TRUE(fp8.missing.empty());
  EXPECT_TRUE(fp8.unexpected.empty());
  EXPECT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.wrong.size(), 5u * 8 * 3 * 2);  // 5 layers x 8 experts x (w1, w2, w3) x (weight, scale)
  const WrongTensor& w = fp8.wrong.at(0);
  EXPECT_EQ(w.name, "layers.0.ffn.experts.0.w1.weight");
  EXPECT_EQ(w.expected_dtype, DType::kF8E4M3);
  EXPECT_EQ(w.expected_shape, (Shape{256, 512}));
  EXPECT_EQ(w.actual_dtype, DType::kI8);
  EXPECT_EQ(w.actual_shape, (Shape{256, 256}));

  p = cfg.params();
  p.n_routed_experts = 9;  // one expert more than the checkpoint has
  const CheckpointCheck more = check_checkpoint(ModelConfig(p, "9 experts"), ckpt);
  EXPECT_EQ(more.missing.size(), 5u * 3 * 2);
  EXPECT_EQ(more.missing.at(0), "layers.0.ffn.experts.8.w1.weight");
  // gate.weight [9, D] in every layer, gate.bias [9] in the 4 score-routed ones.
  EXPECT_EQ(more.wrong.size(), 5u + 4u);
  EXPECT_TRUE(more.unexpected.empty());

  p = cfg.params();
  p.n_routed_experts = 7;
  const CheckpointCheck fewer = check_checkpoint(ModelConfig(p, "7 experts"), ckpt);
  EXPECT_TRUE(fewer.missing.empty());
  EXPECT_EQ(fewer.unexpected.size(), 5u * 3 * 2);
  EXPECT_EQ(fewer.unexpected.at(0), "layers.0.ffn.experts.7.w1.scale");  // sorted by name
}

TEST(SyntheticCheckpoint, SameSeedSameBytesOtherSeedOtherBytes) {
  ModelParams p = small_tiny().params();  // every tensor kind, fewer bytes: 2 experts of width 128
  p.n_routed_experts = 2;
  p.moe_intermediate_size = 128;
  const ModelConfig cfg(p, "micro");
  TempDir a("seed-a");
  TempDir b("seed-b");
  TempDir c("seed-c");
  SyntheticCheckpointOptions options;
  options.seed = 4;
  options.max_shard_bytes = 2 << 20;
  const auto summary = write_synthetic_checkpoint(cfg, a.path(), options);
  write_synthetic_checkpoint(cfg, b.path(), options);
  options.seed = 5;
  write_synthetic_checkpoint(cfg, c.path(), options);
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(a.path())) {
    const fs::path name = entry.path().filename();
    ++files;
    EXPECT_EQ(file_bytes(a.path() / name), file_bytes(b.path() / name)) << name;
    if (name.extension() == ".safetensors") {
      EXPECT_NE(file_bytes(a.path() / name), file_bytes(c.path() / name)) << name;
    }
  }
  EXPECT_EQ(files, summary.shards + 1);  // shards + index
}

TEST(SyntheticCheckpoint, DiskSpaceArithmetic) {
  const ModelConfig pro = preset_config("pro");
  const uint64_t needed = synthetic_checkpoint_disk_bytes(pro);
  EXPECT_GT(needed, expected_checkpoint_bytes(pro));
  EXPECT_LT(needed, expected_checkpoint_bytes(pro) + 145116ull * 256 + 1);
  EXPECT_NO_THROW(check_disk_space(needed, needed, "/x"));
  try {
    check_disk_space(needed, 75'000'000'000ull, "/models/pro");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/models/pro"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(needed)), std::string::npos) << what;
    EXPECT_NE(what.find("75000000000"), std::string::npos) << what;
  }
  EXPECT_EQ(default_shard_bytes(1000), 16u << 20);
  EXPECT_EQ(default_shard_bytes(800ull << 30), 5ull << 30);
  EXPECT_EQ(default_shard_bytes(1ull << 30), 64u << 20);
}

}  // namespace
}  // namespace dsv4
