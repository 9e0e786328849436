// ModelConfig: both key styles parse, the real V4-Pro files give Pro's layout, V4-Flash's values
// give Flash's, and every invalid or missing field is named in the error.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "core/error.h"

namespace dsv4 {
namespace {

using nlohmann::json;

const std::string kConfigs = std::string(DSV4_SHARED_DIR) + "/data/configs/";

// V4-Flash's config.json as MODEL.md §1.1 gives it.
json flash_json() {
  std::vector<int> ratios = {0, 0};
  for (int i = 0; i < 20; ++i) ratios.insert(ratios.end(), {4, 128});
  ratios.insert(ratios.end(), {4, 0});
  return {
      {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"},
      {"vocab_size", 129280}, {"hidden_size", 4096}, {"num_hidden_layers", 43},
      {"num_attention_heads", 64}, {"num_key_value_heads", 1}, {"head_dim", 512},
      {"qk_rope_head_dim", 64}, {"q_lora_rank", 1024}, {"o_groups", 8}, {"o_lora_rank", 1024},
      {"sliding_window", 128}, {"compress_ratios", ratios}, {"compress_rope_theta", 160000},
      {"rope_theta", 10000},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                        {"beta_fast", 32}, {"beta_slow", 1}}},
      {"max_position_embeddings", 1048576}, {"index_n_heads", 64}, {"index_head_dim", 128},
      {"index_topk", 512}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6},
      {"rms_norm_eps", 1e-6}, {"n_routed_experts", 256}, {"num_experts_per_tok", 6},
      {"n_shared_experts", 1}, {"moe_intermediate_size", 2048}, {"scoring_func", "sqrtsoftplus"},
      {"topk_method", "noaux_tc"}, {"norm_topk_prob", true}, {"routed_scaling_factor", 1.5},
      {"swiglu_limit", 10.0}, {"num_hash_layers", 3}, {"num_nextn_predict_layers", 1},
      {"hidden_act", "silu"}, {"tie_word_embeddings", false}, {"bos_token_id", 0},
      {"eos_token_id", 1}, {"torch_dtype", "bfloat16"}, {"expert_dtype", "fp4"},
      {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                               {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}}}};
}

void expect_pro_layout(const ModelConfig& c) {
  EXPECT_EQ(c.num_layers(), 61);
  EXPECT_EQ(c.count_layers(LayerKind::kCsa), 30);
  EXPECT_EQ(c.count_layers(LayerKind::kHca), 31);
  EXPECT_EQ(c.count_layers(LayerKind::kSwa), 0);
  EXPECT_EQ(c.num_mtp_layers(), 1);
  EXPECT_EQ(c.layer_kind(61), LayerKind::kSwa);
  EXPECT_EQ(c.layer_kind(0), LayerKind::kHca);
  EXPECT_EQ(c.layer_kind(1), LayerKind::kHca);
  EXPECT_EQ(c.layer_kind(2), LayerKind::kCsa);
  EXPECT_EQ(c.layer_kind(59), LayerKind::kHca);
  EXPECT_EQ(c.layer_kind(60), LayerKind::kCsa);
  EXPECT_EQ(c->hidden_size, 7168);
  EXPECT_EQ(c->index_topk, 1024);
  EXPECT_EQ(c->n_routed_experts, 384);
  EXPECT_EQ(c->num_experts_per_tok, 6);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_EQ(c->original_max_position_embeddings, 65536);
  EXPECT_DOUBLE_EQ(c->rope_factor, 16);
  EXPECT_TRUE(c.is_hash_layer(2));
  EXPECT_FALSE(c.is_hash_layer(3));
  EXPECT_EQ(c.nope_head_dim(), 448);
}

TEST(ModelConfig, RealProHfConfigParses) {
  expect_pro_layout(load_model_config(kConfigs + "deepseek-v4-pro.config.json"));
}

TEST(ModelConfig, RealProInferenceConfigParses) {
  const ModelConfig c = load_model_config(kConfigs + "deepseek-v4-pro.inference-config.json");
  expect_pro_layout(c);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->hc_eps, 1e-6);
}

TEST(ModelConfig, BothProStylesAgree) {
  const ModelConfig a = load_model_config(kConfigs + "deepseek-v4-pro.config.json");
  const ModelConfig b = load_model_config(kConfigs + "deepseek-v4-pro.inference-config.json");
  json ja = a.to_json(), jb = b.to_json();
  ja.erase("max_position_embeddings");
  jb.erase("max_position_embeddings");
  EXPECT_EQ(ja, jb);
}

TEST(ModelConfig, FlashValuesGiveFlashLayout) {
  const ModelConfig c = parse_model_config(flash_json(), "flash");
  EXPECT_EQ(c.num_layers(), 43);
  EXPECT_EQ(c.count_layers(LayerKind::kSwa), 2);
  EXPECT_EQ(c.count_layers(LayerKind::kCsa), 21);
  EXPECT_EQ(c.count_layers(LayerKind::kHca), 20);
  EXPECT_EQ(c.layer_kind(2), LayerKind::kCsa);
  EXPECT_EQ(c.layer_kind(3), LayerKind::kHca);
  EXPECT_EQ(c.layer_kind(42), LayerKind::kCsa);
  EXPECT_EQ(c.layer_kind(43), LayerKind::kSwa);  // MTP
  EXPECT_FALSE(c.uses_yarn(0));
  EXPECT_TRUE(c.uses_yarn(2));
}

TEST(ModelConfig, ToJsonRoundTrips) {
  const ModelConfig c = parse_model_config(flash_json(), "flash");
  const ModelConfig d = parse_model_config(c.to_json(), "again");
  EXPECT_EQ(c.to_json(), d.to_json());
}

TEST(ModelConfig, CompressRatiosWithoutMtpEntryGetSwaMtp) {
  json j = flash_json();
  auto r = j["compress_ratios"].get<std::vector<int>>();
  r.pop_back();
  j["compress_ratios"] = r;
  const ModelConfig c = parse_model_config(j, "flash");
  EXPECT_EQ(c.layer_kind(43), LayerKind::kSwa);
}

TEST(ModelConfig, NestedRopeParametersAccepted) {
  json j = flash_json();
  j.erase("rope_theta");
  j.erase("compress_rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"main", {{"rope_theta", 10000}, {"rope_type", "default"}}},
                          {"compress", {{"rope_theta", 160000}, {"rope_type", "yarn"}, {"factor", 16},
                                        {"original_max_position_embeddings", 65536},
                                        {"beta_fast", 32}, {"beta_slow", 1}}}};
  j.erase("qk_rope_head_dim");
  j["qk_nope_head_dim"] = 448;
  const ModelConfig c = parse_model_config(j, "nested");
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_DOUBLE_EQ(c->compress_rope_theta, 160000);
  EXPECT_EQ(c->original_max_position_embeddings, 65536);
}

// Each case: a mutation of the Flash config, and words the error must contain.
struct BadCase {
  std::string what;
  std::function<void(json&)> mutate;
  std::vector<std::string> expect;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.what; }

class InvalidConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(InvalidConfig, ErrorNamesFieldAndValue) {
  json j = flash_json();
  GetParam().mutate(j);
  try {
    parse_model_config(j, "cfg.json");
    FAIL() << "accepted: " << GetParam().what;
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
    for (const auto& word : GetParam().expect) EXPECT_NE(msg.find(word), std::string::npos) << msg;
  }
}

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> v;
  const char* required[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_groups", "o_lora_rank",
                            "sliding_window", "compress_ratios", "compress_rope_theta", "rope_theta",
                            "max_position_embeddings", "index_n_heads", "index_head_dim", "index_topk",
                            "hc_mult", "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps", "n_routed_experts",
                            "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
                            "scoring_func", "routed_scaling_factor", "swiglu_limit", "num_hash_layers",
                            "num_nextn_predict_layers"};
  for (const char* f : required)
    v.push_back({std::string("missing ") + f, [f](json& j) { j.erase(f); }, {f, "missing"}});
  auto set = [&](const std::string& field, json value, std::vector<std::string> words) {
    words.push_back(field);
    v.push_back({field + "=" + value.dump(), [field, value](json& j) { j[field] = value; }, words});
  };
  set("hidden_size", -4096, {"-4096", "positive"});
  set("hidden_size", 4000, {"4000", "multiple of 128"});
  set("hidden_size", "4096", {"\"4096\"", "integer"});
  set("vocab_size", 0, {"0", "positive"});
  set("num_hidden_layers", 2.5, {"2.5", "integer"});
  set("num_key_value_heads", 8, {"8"});
  set("qk_rope_head_dim", 63, {"63", "even"});
  set("qk_rope_head_dim", 512, {"512"});
  set("o_groups", 7, {"7", "divide"});
  set("num_experts_per_tok", 300, {"300", "n_routed_experts"});
  set("n_shared_experts", 2, {"2"});
  set("scoring_func", "relu", {"relu", "sqrtsoftplus"});
  set("topk_method", "greedy", {"greedy"});
  set("expert_dtype", "int4", {"int4"});
  set("hc_eps", -1.0, {"-1", "positive"});
  set("rms_norm_eps", 0, {"positive"});
  set("num_hash_layers", 44, {"44"});
  set("compress_ratios", json::array({0, 4}), {"one entry per layer", "43"});
  set("compress_ratios", "[0]", {"list"});
  set("model_type", "llama", {"llama"});
  set("bos_token_id", 200000, {"200000"});
  set("swiglu_limit", -1, {"-1"});
  v.push_back({"ratio 8", [](json& j) { j["compress_ratios"][5] = 8; }, {"compress_ratios[5]", "8"}});
  v.push_back({"ratio string", [](json& j) { j["compress_ratios"][5] = "4"; }, {"compress_ratios[5]"}});
  v.push_back({"mtp ratio", [](json& j) { j["compress_ratios"][43] = 4; }, {"compress_ratios[43]", "MTP"}});
  v.push_back({"rope type", [](json& j) { j["rope_scaling"]["type"] = "linear"; },
               {"rope_scaling.type", "linear"}});
  v.push_back({"rope factor", [](json& j) { j["rope_scaling"].erase("factor"); },
               {"rope_scaling.factor", "missing"}});
  v.push_back({"block size", [](json& j) { j["quantization_config"]["weight_block_size"] = {64, 64}; },
               {"quantization_config.weight_block_size", "[64,64]"}});
  v.push_back({"not an object", [](json& j) { j = json::array(); }, {"object"}});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fields, InvalidConfig, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(ModelConfig, InferenceStyleErrorsNameInferenceKeys) {
  json j = json::parse(R"({"dim": 4096, "vocab_size": 1000})");
  try {
    parse_model_config(j, "inf.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n_layers"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, FileErrorsNameTheFile) {
  EXPECT_THROW(load_model_config("/nonexistent/config.json"), IoError);
  const std::string bad = ::testing::TempDir() + "/bad_config.json";
  FILE* f = std::fopen(bad.c_str(), "w");
  std::fputs("{\"hidden_size\": ", f);
  std::fclose(f);
  try {
    load_model_config(bad);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos);
  }
  std::filesystem::remove(bad);
}

// Reported: `1e400` in an integer field came out as nlohmann's raw out_of_range exception. The
// parser cannot hold the number, so the field is found by tracking the keys while parsing.
TEST(ModelConfig, NumbersBeyondRangeAreNamedWithTheirField) {
  const auto expect_named = [](const std::string& replace_key, const std::string& value,
                               const std::string& field) {
    json j = flash_json();
    std::string text = j.dump();
    const std::string needle = "\"" + replace_key + "\":";
    const size_t at = text.find(needle) + needle.size();
    text.replace(at, text.find_first_of(",}", at) - at, value);
    const std::string path = ::testing::TempDir() + "/range_config.json";
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    try {
      load_model_config(path);
      ADD_FAILURE() << "accepted " << value;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("field '" + field + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(value), std::string::npos) << what;
      EXPECT_NE(what.find("out of range"), std::string::npos) << what;
    }
    std::filesystem::remove(path);
  };
  expect_named("max_position_embeddings", "1e400", "max_position_embeddings");
  expect_named("hc_eps", "-1e400", "hc_eps");
  expect_named("original_max_position_embeddings", "1e400", "rope_scaling.original_max_position_embeddings");
  // Integers beyond int64 (nlohmann keeps them as uint64) no longer wrap to negative values.
  expect_named("vocab_size", "18446744073709551615", "vocab_size");
}

}  // namespace
}  // namespace dsv4
