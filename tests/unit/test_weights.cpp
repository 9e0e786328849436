// The checkpoint naming scheme against the real V4-Pro tensor list facts of MODEL.md, and
// FP8 / MXFP4 dequantisation and the FP4 -> FP8 cast against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "config/model_config.h"
#include "config/presets.h"
#include "core/error.h"
#include "core/numeric.h"
#include "loader/weights.h"

namespace dsv4 {
namespace {

const std::string kProConfig = std::string(DSV4_SHARED_DIR) + "/data/configs/deepseek-v4-pro.config.json";

using TensorMap = std::map<std::string, ExpectedTensor>;

TensorMap by_name(const std::vector<ExpectedTensor>& list) {
  TensorMap m;
  for (const ExpectedTensor& t : list) EXPECT_TRUE(m.emplace(t.spec.name, t).second) << t.spec.name;
  return m;
}

class ProTensors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cfg_ = new ModelConfig(load_model_config(kProConfig));
    list_ = new std::vector<ExpectedTensor>(expected_tensors(*cfg_));
    map_ = new TensorMap(by_name(*list_));
  }
  static void TearDownTestSuite() {
    delete map_;
    delete list_;
    delete cfg_;
  }
  // Checks one tensor's dtype and shape; fails (not crashes) when it is absent.
  static void expect(const std::string& name, DType dtype, const Shape& shape) {
    const auto it = map_->find(name);
    ASSERT_NE(it, map_->end()) << name << " missing";
    EXPECT_EQ(it->second.spec.dtype, dtype) << name;
    EXPECT_EQ(it->second.spec.shape, shape) << name;
  }
  static bool has(const std::string& name) { return map_->contains(name); }

  static ModelConfig* cfg_;
  static std::vector<ExpectedTensor>* list_;
  static TensorMap* map_;
};
ModelConfig* ProTensors::cfg_ = nullptr;
std::vector<ExpectedTensor>* ProTensors::list_ = nullptr;
TensorMap* ProTensors::map_ = nullptr;

TEST_F(ProTensors, AttentionShapesMatchTheProList) {
  for (const std::string p : {"layers.0.", "layers.37.", "mtp.0."}) {
    expect(p + "attn.wq_a.weight", DType::kF8E4M3, {1536, 7168});
    expect(p + "attn.wq_a.scale", DType::kF8E8M0, {12, 56});
    expect(p + "attn.wq_b.weight", DType::kF8E4M3, {65536, 1536});
    expect(p + "attn.wq_b.scale", DType::kF8E8M0, {512, 12});
    expect(p + "attn.wkv.weight", DType::kF8E4M3, {512, 7168});
    expect(p + "attn.wkv.scale", DType::kF8E8M0, {4, 56});
    expect(p + "attn.wo_a.weight", DType::kF8E4M3, {16384, 4096});
    expect(p + "attn.wo_a.scale", DType::kF8E8M0, {128, 32});
    expect(p + "attn.wo_b.weight", DType::kF8E4M3, {7168, 16384});
    expect(p + "attn.wo_b.scale", DType::kF8E8M0, {56, 128});
    expect(p + "attn.attn_sink", DType::kF32, {128});
    expect(p + "attn.q_norm.weight", DType::kBF16, {1536});
    expect(p + "attn.kv_norm.weight", DType::kBF16, {512});
    expect(p + "hc_attn_fn", DType::kF32, {24, 28672});
    expect(p + "hc_ffn_base", DType::kF32, {24});
    expect(p + "hc_ffn_scale", DType::kF32, {3});
  }
  expect("hc_head_fn", DType::kF32, {4, 28672});
  expect("hc_head_base", DType::kF32, {4});
  expect("hc_head_scale", DType::kF32, {1});
  expect("embed.weight", DType::kBF16, {129280, 7168});
  expect("head.weight", DType::kBF16, {129280, 7168});
}

TEST_F(ProTensors, CompressorAndIndexerFollowTheLayerKinds) {
  // ape [128,512] on layers 0,1,3,5,..,59 (HCA); [4,1024] on 2,4,..,60 (CSA); indexer on CSA only.
  for (int l = 0; l < 61; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".attn.";
    const bool csa = l >= 2 && l % 2 == 0;
    SCOPED_TRACE(p);
    if (csa) {
      expect(p + "compressor.ape", DType::kF32, {4, 1024});
      expect(p + "compressor.wkv.weight", DType::kBF16, {1024, 7168});
      expect(p + "compressor.wgate.weight", DType::kBF16, {1024, 7168});
      expect(p + "indexer.wq_b.weight", DType::kF8E4M3, {8192, 1536});
      expect(p + "indexer.wq_b.scale", DType::kF8E8M0, {64, 12});
      expect(p + "indexer.weights_proj.weight", DType::kBF16, {64, 7168});
      expect(p + "indexer.compressor.wkv.weight", DType::kBF16, {256, 7168});
      expect(p + "indexer.compressor.ape", DType::kF32, {4, 256});
      expect(p + "indexer.compressor.norm.weight", DType::kBF16, {128});
    } else {
      expect(p + "compressor.ape", DType::kF32, {128, 512});
      expect(p + "compressor.wkv.weight", DType::kBF16, {512, 7168});
      EXPECT_FALSE(has(p + "indexer.wq_b.weight"));
      EXPECT_FALSE(has(p + "indexer.compressor.ape"));
    }
    expect(p + "compressor.norm.weight", DType::kBF16, {512});
  }
  // The MTP layer is SWA-only: no compressor, no indexer.
  EXPECT_FALSE(has("mtp.0.attn.compressor.ape"));
  EXPECT_FALSE(has("mtp.0.attn.indexer.wq_b.weight"));
}

TEST_F(ProTensors, MoeShapesAndRouting) {
  for (int l = 0; l < 61; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".ffn.";
    SCOPED_TRACE(p);
    expect(p + "gate.weight", DType::kBF16, {384, 7168});
    if (l < 3) {
      expect(p + "gate.tid2eid", DType::kI64, {129280, 6});
      EXPECT_FALSE(has(p + "gate.bias"));
    } else {
      expect(p + "gate.bias", DType::kF32, {384});
      EXPECT_FALSE(has(p + "gate.tid2eid"));
    }
  }
  expect("mtp.0.ffn.gate.bias", DType::kF32, {384});
  EXPECT_FALSE(has("mtp.0.ffn.gate.tid2eid"));
  for (const std::string p : {"layers.5.ffn.", "mtp.0.ffn."}) {
    expect(p + "experts.0.w1.weight", DType::kI8, {3072, 3584});
    expect(p + "experts.0.w1.scale", DType::kF8E8M0, {3072, 224});
    expect(p + "experts.383.w3.weight", DType::kI8, {3072, 3584});
    expect(p + "experts.383.w2.weight", DType::kI8, {7168, 1536});
    expect(p + "experts.383.w2.scale", DType::kF8E8M0, {7168, 96});
    expect(p + "shared_experts.w1.weight", DType::kF8E4M3, {3072, 7168});
    expect(p + "shared_experts.w1.scale", DType::kF8E8M0, {24, 56});
    expect(p + "shared_experts.w2.weight", DType::kF8E4M3, {7168, 3072});
    expect(p + "shared_experts.w2.scale", DType::kF8E8M0, {56, 24});
  }
  EXPECT_FALSE(has("layers.5.ffn.experts.384.w1.weight"));
  EXPECT_EQ(map_->at("layers.5.ffn.experts.0.w1.weight").format, WeightFormat::kMxfp4);
  EXPECT_EQ(map_->at("layers.5.ffn.shared_experts.w1.weight").format, WeightFormat::kFp8);
}

TEST_F(ProTensors, MtpHasItsOwnProjectionsNormsAndHead) {
  expect("mtp.0.e_proj.weight", DType::kF8E4M3, {7168, 7168});
  expect("mtp.0.e_proj.scale", DType::kF8E8M0, {56, 56});
  expect("mtp.0.h_proj.weight", DType::kF8E4M3, {7168, 7168});
  for (const std::string n : {"enorm", "hnorm", "norm", "attn_norm", "ffn_norm"})
    expect("mtp.0." + n + ".weight", DType::kBF16, {7168});
  expect("mtp.0.hc_head_fn", DType::kF32, {4, 28672});
  expect("mtp.0.hc_head_scale", DType::kF32, {1});
  EXPECT_FALSE(has("mtp.1.attn_norm.weight"));
  EXPECT_FALSE(has("layers.61.attn_norm.weight"));
}

// The published Pro checkpoint holds 145,116 tensors in "805 GB" (MODEL.md §7.2). The list built
// from §7.2's scheme has exactly that count, so the scheme is complete, and its data comes to
// 864.7e9 bytes = 805.3 GiB: the published figure is in binary gigabytes.
TEST_F(ProTensors, TotalsMatchThePublishedCheckpoint) {
  EXPECT_EQ(list_->size(), 145116u);
  const double gib = static_cast<double>(expected_checkpoint_bytes(*cfg_)) / (1ull << 30);
  EXPECT_GT(gib, 804.5);
  EXPECT_LT(gib, 806.0);
}

TEST_F(ProTensors, EveryQuantisedWeightIsFollowedByItsScale) {
  for (size_t i = 0; i < list_->size(); ++i) {
    const ExpectedTensor& t = (*list_)[i];
    if (t.format == WeightFormat::kPlain) continue;
    ASSERT_LT(i + 1, list_->size());
    const std::string& name = t.spec.name;
    const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
    EXPECT_EQ((*list_)[i + 1].spec.name, stem + ".scale");
    EXPECT_EQ((*list_)[i + 1].spec.dtype, DType::kF8E8M0);
  }
}

TEST(LayerPrefix, MainAndMtpLayers) {
  const ModelConfig cfg = preset_config("tiny");
  EXPECT_EQ(layer_prefix(cfg, 0), "layers.0.");
  EXPECT_EQ(layer_prefix(cfg, 3), "layers.3.");
  EXPECT_EQ(layer_prefix(cfg, 4), "mtp.0.");
  EXPECT_THROW(layer_prefix(cfg, 5), UsageError);
  EXPECT_THROW(layer_prefix(cfg, -1), UsageError);
}

TEST(ExpectedTensors, Fp8ExpertsUseBlockScales) {
  ModelParams p = preset_config("tiny").params();
  p.expert_dtype = ExpertDType::kFp8;
  const TensorMap m = by_name(expected_tensors(ModelConfig(p, "test")));
  const ExpectedTensor& w2 = m.at("layers.1.ffn.experts.7.w2.weight");
  EXPECT_EQ(w2.format, WeightFormat::kFp8);
  EXPECT_EQ(w2.spec.dtype, DType::kF8E4M3);
  EXPECT_EQ(w2.spec.shape, (Shape{512, 256}));
  EXPECT_EQ(m.at("layers.1.ffn.experts.7.w2.scale").spec.shape, (Shape{4, 2}));
}

TEST(ExpectedTensors, TinyLayoutPerLayer) {
  const TensorMap m = by_name(expected_tensors(preset_config("tiny")));
  // Layer 0: SWA-only, hash routed. Layers 1, 3: CSA. Layer 2: HCA.
  EXPECT_FALSE(m.contains("layers.0.attn.compressor.ape"));
  EXPECT_EQ(m.at("layers.0.ffn.gate.tid2eid").spec.shape, (Shape{129280, 2}));
  EXPECT_EQ(m.at("layers.1.attn.compressor.ape").spec.shape, (Shape{4, 1024}));
  EXPECT_EQ(m.at("layers.1.attn.indexer.wq_b.weight").spec.shape, (Shape{512, 256}));
  EXPECT_EQ(m.at("layers.2.attn.compressor.ape").spec.shape, (Shape{128, 512}));
  EXPECT_FALSE(m.contains("layers.2.attn.indexer.wq_b.weight"));
  EXPECT_EQ(m.at("layers.3.ffn.gate.bias").spec.shape, (Shape{8}));
  EXPECT_EQ(m.at("layers.0.attn.wo_a.weight").spec.shape, (Shape{256, 2048}));
  EXPECT_EQ(m.at("layers.0.ffn.experts.0.w1.weight").spec.shape, (Shape{256, 256}));
  EXPECT_EQ(m.at("layers.0.ffn.experts.0.w1.scale").spec.shape, (Shape{256, 16}));
}

// ---- dequantisation ----

// e4m3 codes used below: 0x38 = 1.0, 0x3C = 1.5, 0xB8 = -1.0, 0x01 = 2^-9 (smallest subnormal),
// 0x7E = 448 (largest), 0x00 = 0. e8m0: 127 = 1, 128 = 2, 120 = 2^-7, 130 = 8.
TEST(DequantFp8, HandComputedValuesAcrossBlockEdges) {
  const int64_t rows = 130;
  const int64_t cols = 200;  // 2 x 2 blocks, the second ones partial
  Tensor w(DType::kF8E4M3, {rows, cols});
  Tensor s(DType::kF8E8M0, {2, 2});
  uint8_t* c = w.data<uint8_t>();
  auto at = [&](int64_t r, int64_t col) -> uint8_t& { return c[r * cols + col]; };
  at(0, 0) = 0x38;
  at(0, 127) = 0x3C;
  at(0, 128) = 0x38;
  at(127, 199) = 0xB8;
  at(128, 0) = 0x7E;
  at(129, 127) = 0x01;
  at(129, 128) = 0x3C;
  at(129, 199) = 0xB8;
  s.data<uint8_t>()[0] = 127;
  s.data<uint8_t>()[1] = 128;
  s.data<uint8_t>()[2] = 120;
  s.data<uint8_t>()[3] = 130;
  std::vector<float> out(static_cast<size_t>(rows * cols), -7.0f);
  dequant_fp8_block(w.view(), s.view(), out, "t");
  auto v = [&](int64_t r, int64_t col) { return out[static_cast<size_t>(r * cols + col)]; };
  EXPECT_EQ(v(0, 0), 1.0f);
  EXPECT_EQ(v(0, 127), 1.5f);
  EXPECT_EQ(v(0, 128), 2.0f);     // block (0, 1): scale 2
  EXPECT_EQ(v(127, 199), -2.0f);  // last row of block row 0
  EXPECT_EQ(v(128, 0), 448.0f / 128.0f);
  EXPECT_EQ(v(129, 127), std::ldexp(1.0f, -16));  // 2^-9 * 2^-7
  EXPECT_EQ(v(129, 128), 12.0f);
  EXPECT_EQ(v(129, 199), -8.0f);
  EXPECT_EQ(v(5, 5), 0.0f);
}

TEST(DequantFp8, RejectsWrongShapesAndDtypes) {
  Tensor w(DType::kF8E4M3, {130, 200});
  Tensor bad_scale(DType::kF8E8M0, {1, 2});
  std::vector<float> out(130 * 200);
  try {
    dequant_fp8_block(w.view(), bad_scale.view(), out, "layers.0.attn.wq_a");
    FAIL() << "no error";
  } catch (const TensorError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.attn.wq_a"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 2]"), std::string::npos) << e.what();
  }
  Tensor f32_scale(DType::kF32, {2, 2});
  EXPECT_THROW(dequant_fp8_block(w.view(), f32_scale.view(), out, "x"), TensorError);
  Tensor good_scale(DType::kF8E8M0, {2, 2});
  std::vector<float> short_out(10);
  EXPECT_THROW(dequant_fp8_block(w.view(), good_scale.view(), short_out, "x"), TensorError);
  Tensor bf16_w(DType::kBF16, {130, 200});
  EXPECT_THROW(dequant_fp8_block(bf16_w.view(), good_scale.view(), out, "x"), TensorError);
}

// e2m1 codes: 1 = 0.5, 2 = 1.0, 7 = 6.0, 0xF = -6.0, 0xB = -1.5, 0x5 = 3.
TEST(DequantMxfp4, HandComputedValuesAndNibbleOrder) {
  Tensor w(DType::kI8, {2, 32});  // [2, 64] values
  Tensor s(DType::kF8E8M0, {2, 2});
  uint8_t* b = w.data<uint8_t>();
  b[0] = 0x21;       // element 0 = 0.5 (low nibble), element 1 = 1.0 (high nibble)
  b[15] = 0xF7;      // element 30 = 6, element 31 = -6
  b[16] = 0x5B;      // element 32 = -1.5, element 33 = 3 (next scale group)
  b[32 + 31] = 0x70; // row 1: element 62 = 0, element 63 = 6
  s.data<uint8_t>()[0] = 127;  // 1
  s.data<uint8_t>()[1] = 129;  // 4
  s.data<uint8_t>()[2] = 127;
  s.data<uint8_t>()[3] = 126;  // 0.5
  std::vector<float> out(128, -7.0f);
  dequant_mxfp4(w.view(), s.view(), out, "t");
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[30], 6.0f);
  EXPECT_EQ(out[31], -6.0f);
  EXPECT_EQ(out[32], -6.0f);
  EXPECT_EQ(out[33], 12.0f);
  EXPECT_EQ(out[64 + 62], 0.0f);
  EXPECT_EQ(out[64 + 63], 3.0f);
}

TEST(DequantMxfp4, RejectsWrongShapes) {
  Tensor w(DType::kI8, {2, 32});
  Tensor s(DType::kF8E8M0, {2, 4});
  std::vector<float> out(128);
  try {
    dequant_mxfp4(w.view(), s.view(), out, "layers.1.ffn.experts.3.w2");
    FAIL() << "no error";
  } catch (const TensorError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.ffn.experts.3.w2"), std::string::npos) << e.what();
  }
  Tensor odd(DType::kI8, {2, 20});  // 40 inputs: not a multiple of 32
  Tensor s2(DType::kF8E8M0, {2, 1});
  std::vector<float> out2(80);
  EXPECT_THROW(dequant_mxfp4(odd.view(), s2.view(), out2, "x"), TensorError);
  Tensor f8(DType::kF8E4M3, {2, 32});
  EXPECT_THROW(dequant_mxfp4(f8.view(), s.view(), out, "x"), TensorError);
}

// A packed weight [rows, cols] with every e2m1 code and per-32 scales spread over `spread`
// codes (0..spread) above `base`, varying along rows and columns.
struct Mxfp4Weight {
  Tensor w;
  Tensor s;
};
Mxfp4Weight patterned_mxfp4(int64_t rows, int64_t cols, int base, int spread) {
  Mxfp4Weight m{Tensor(DType::kI8, {rows, cols / 2}), Tensor(DType::kF8E8M0, {rows, cols / 32})};
  uint8_t* b = m.w.data<uint8_t>();
  for (int64_t i = 0; i < rows * cols / 2; ++i) b[i] = static_cast<uint8_t>((i * 37 + i / 7) & 0xff);
  uint8_t* s = m.s.data<uint8_t>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / 32; ++g)
      s[r * (cols / 32) + g] = static_cast<uint8_t>(base + (r * 3 + g * 5) % (spread + 1));
  return m;
}

TEST(CastMxfp4ToFp8, DequantisesBitForBitLikeTheFp4Weight) {
  const int64_t rows = 200;
  const int64_t cols = 320;  // 2 x 3 blocks of 128, the last row and column blocks partial
  const Mxfp4Weight m = patterned_mxfp4(rows, cols, 120, 6);
  const Fp8BlockWeight fp8 = cast_mxfp4_to_fp8(m.w.view(), m.s.view(), "t");
  ASSERT_EQ(fp8.weight.shape(), (Shape{rows, cols}));
  ASSERT_EQ(fp8.scale.shape(), (Shape{2, 3}));
  for (uint8_t code : fp8.scale.span<uint8_t>()) EXPECT_EQ(code, 120);  // s_max 126 - 6
  std::vector<float> a(static_cast<size_t>(rows * cols));
  std::vector<float> b(a.size());
  dequant_mxfp4(m.w.view(), m.s.view(), a, "t");
  dequant_fp8_block(fp8.weight.view(), fp8.scale.view(), b, "t");
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  size_t negative_zero = 0;
  for (float x : b) negative_zero += (x == 0.0f && std::signbit(x));
  EXPECT_GT(negative_zero, 0u);  // code 0x8 (-0) survives as -0
}

TEST(CastMxfp4ToFp8, BlockScalesFollowEachBlocksLargestScale) {
  Mxfp4Weight m = patterned_mxfp4(256, 256, 100, 0);
  uint8_t* s = m.s.data<uint8_t>();
  s[0] = 104;              // block (0, 0): max 104
  s[200 * 8 + 5] = 105;    // row 200, group 5 (inputs 160..191): block (1, 1)
  const Fp8BlockWeight fp8 = cast_mxfp4_to_fp8(m.w.view(), m.s.view(), "t");
  const uint8_t* bs = fp8.scale.data<uint8_t>();
  EXPECT_EQ(bs[0], 98);
  EXPECT_EQ(bs[1], 94);
  EXPECT_EQ(bs[2], 94);
  EXPECT_EQ(bs[3], 99);
  std::vector<float> a(256 * 256);
  std::vector<float> b(a.size());
  dequant_mxfp4(m.w.view(), m.s.view(), a, "t");
  dequant_fp8_block(fp8.weight.view(), fp8.scale.view(), b, "t");
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// The shifts the cast applies: e2m1 x 2^shift x the block's scale is the MXFP4 value, and each
// group's scale is its block's times 2^shift.
TEST(CastMxfp4ToFp8, BlockShiftsRebuildTheWeight) {
  const int64_t rows = 200, cols = 320;
  const Mxfp4Weight m = patterned_mxfp4(rows, cols, 120, 6);
  const Mxfp4BlockShifts shifts = mxfp4_block_shifts(m.w.view(), m.s.view(), "t");
  ASSERT_EQ(shifts.block_scale.shape(), (Shape{2, 3}));
  ASSERT_EQ(shifts.shift.shape(), (Shape{rows, cols / 32}));
  std::vector<float> want(static_cast<size_t>(rows * cols));
  dequant_mxfp4(m.w.view(), m.s.view(), want, "t");
  const uint8_t* packed = m.w.data<uint8_t>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t shift = shifts.shift.data<uint8_t>()[r * (cols / 32) + c / 32];
      const uint8_t block = shifts.block_scale.data<uint8_t>()[(r / 128) * 3 + c / 128];
      ASSERT_LE(shift, kMxfp4MaxShift);
      ASSERT_EQ(block + shift, m.s.data<uint8_t>()[r * (cols / 32) + c / 32]);
      const uint8_t byte = packed[(r * cols + c) / 2];
      const float v = e2m1_to_float(c % 2 == 0 ? e2m1x2_low(byte) : e2m1x2_high(byte));
      ASSERT_EQ(std::ldexp(v, shift) * e8m0_to_float(block), want[static_cast<size_t>(r * cols + c)]) << r << ", " << c;
    }
}

TEST(CastMxfp4ToFp8, RefusesBlocksWhoseScalesSpanMoreThan2To6) {
  Mxfp4Weight m = patterned_mxfp4(128, 256, 120, 0);
  m.s.data<uint8_t>()[3] = 127;  // block (0, 0): 127 vs 120 is 2^7 apart
  try {
    cast_mxfp4_to_fp8(m.w.view(), m.s.view(), "layers.9.ffn.experts.1.w1");
    FAIL() << "no error";
  } catch (const TensorError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layers.9.ffn.experts.1.w1"), std::string::npos) << what;
    EXPECT_NE(what.find("block (0, 0)"), std::string::npos) << what;
  }
  // The same spread across two different blocks is fine.
  Mxfp4Weight ok = patterned_mxfp4(128, 256, 120, 0);
  for (int64_t r = 0; r < 128; ++r)  // all of block (0, 1): groups 4..7
    for (int64_t g = 4; g < 8; ++g) ok.s.data<uint8_t>()[r * 8 + g] = 127;
  EXPECT_NO_THROW(cast_mxfp4_to_fp8(ok.w.view(), ok.s.view(), "t"));
}

}  // namespace
}  // namespace dsv4
