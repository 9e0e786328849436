// make-model presets: each has the layer layout MODEL.md §13 / §1.1 gives it, and the full `pro`
// preset describes the same checkpoint as the published V4-Pro config.json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "config/presets.h"
#include "core/error.h"
#include "loader/weights.h"

namespace dsv4 {
namespace {

std::vector<std::string> kinds(const ModelConfig& cfg) {
  std::vector<std::string> out;
  for (LayerKind k : cfg.layer_kinds()) out.emplace_back(layer_kind_name(k));
  return out;
}

using Names = std::vector<std::string>;

TEST(Presets, TinyHasOneLayerOfEachKind) {
  const ModelConfig c = preset_config("tiny");
  EXPECT_EQ(kinds(c), (Names{"swa", "csa", "hca", "csa"}));
  EXPECT_EQ(c.num_mtp_layers(), 1);
  EXPECT_EQ(c.layer_kind(4), LayerKind::kSwa);
  EXPECT_EQ(c->vocab_size, 129280);
  EXPECT_EQ(c->hidden_size, 512);
  EXPECT_EQ(c->num_hash_layers, 1);
  EXPECT_EQ(c->n_routed_experts, 8);
  EXPECT_EQ(c->index_topk, 16);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 1.5);
}

TEST(Presets, ProTopologyStartsWithHcaAndHashesThreeLayers) {
  const ModelConfig c = preset_config("pro-topology");
  EXPECT_EQ(kinds(c), (Names{"hca", "csa", "hca", "csa"}));
  EXPECT_EQ(c.layer_kind(4), LayerKind::kSwa);
  EXPECT_EQ(c->num_hash_layers, 3);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_EQ(c->hidden_size, 512);
}

TEST(Presets, Flash2LayerHasFlashGeometry) {
  const ModelConfig c = preset_config("flash-2layer");
  EXPECT_EQ(kinds(c), (Names{"csa", "hca"}));
  EXPECT_EQ(c.layer_kind(2), LayerKind::kSwa);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->n_routed_experts, 256);
  EXPECT_EQ(c->moe_intermediate_size, 2048);
  EXPECT_EQ(c->num_hash_layers, 1);
  EXPECT_EQ(c->index_topk, 512);
}

TEST(Presets, FlashAndProHaveTheReleasedLayouts) {
  const ModelConfig flash = preset_config("flash");
  EXPECT_EQ(flash.num_layers(), 43);
  EXPECT_EQ(flash.count_layers(LayerKind::kSwa), 2);
  EXPECT_EQ(flash.count_layers(LayerKind::kCsa), 21);
  EXPECT_EQ(flash.count_layers(LayerKind::kHca), 20);
  const ModelConfig pro = preset_config("pro");
  EXPECT_EQ(pro.num_layers(), 61);
  EXPECT_EQ(pro.count_layers(LayerKind::kCsa), 30);
  EXPECT_EQ(pro.count_layers(LayerKind::kHca), 31);
}

bool same_tensors(const std::vector<ExpectedTensor>& a, const std::vector<ExpectedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].spec.name != b[i].spec.name || a[i].spec.dtype != b[i].spec.dtype ||
        a[i].spec.shape != b[i].spec.shape || a[i].format != b[i].format)
      return false;
  return true;
}

TEST(Presets, ProPresetDescribesThePublishedCheckpoint) {
  const ModelConfig real = load_model_config(std::string(DSV4_SHARED_DIR) +
                                             "/data/configs/deepseek-v4-pro.config.json");
  EXPECT_TRUE(same_tensors(expected_tensors(preset_config("pro")), expected_tensors(real)));
}

TEST(Presets, ConfigJsonRoundTrips) {
  for (const PresetInfo& info : model_presets()) {
    const ModelConfig c = preset_config(info.name);
    const ModelConfig back = parse_model_config(c.to_json(), "round trip");
    EXPECT_EQ(back.to_json(), c.to_json()) << info.name;
    EXPECT_EQ(back.layer_kinds(), c.layer_kinds()) << info.name;
  }
}

TEST(Presets, UnknownNameListsTheKnownOnes) {
  try {
    preset_config("huge");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("huge"), std::string::npos);
    for (const PresetInfo& info : model_presets()) EXPECT_NE(what.find(info.name), std::string::npos);
  }
  EXPECT_EQ(model_presets().size(), 5u);
}

}  // namespace
}  // namespace dsv4
