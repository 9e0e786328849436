// RoPE frequencies of MODEL.md §3.2: plain base^(-2i/64) for SWA-only layers and the MTP;
// compress_rope_theta = 160000 with YaRN (factor 16, original 65536, beta 32/1, so the ramp runs
// from i = 15 to i = 25) for compressed layers.
#include <gtest/gtest.h>

#include <cmath>

#include "config/model_config.h"
#include "model/rope.h"

namespace dsv4 {
namespace {

const YarnParams kV4Yarn{16, 65536, 32, 1};

TEST(Rope, YarnRampOfTheV4Config) {
  const YarnRange r = yarn_correction_range(64, 160000, kV4Yarn);
  EXPECT_EQ(r.low, 15);   // floor(64 ln(65536 / (64 pi)) / (2 ln 160000)) = floor(15.45)
  EXPECT_EQ(r.high, 25);  // ceil(64 ln(65536 / (2 pi)) / (2 ln 160000)) = ceil(24.71)
}

TEST(Rope, PlainFrequenciesAreBasePowers) {
  const std::vector<float> f = rope_inv_freq(64, 10000, std::nullopt);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(f[i], std::pow(10000.0, -2.0 * i / 64), 1e-6 * std::pow(10000.0, -2.0 * i / 64)) << i;
  EXPECT_EQ(f[0], 1.0f);
}

TEST(Rope, YarnKeepsHighFrequenciesDividesLowOnesAndBlendsBetween) {
  const std::vector<float> plain = rope_inv_freq(64, 160000, std::nullopt);
  const std::vector<float> yarn = rope_inv_freq(64, 160000, kV4Yarn);
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(yarn[i], plain[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_FLOAT_EQ(yarn[i], plain[i] / 16) << i;
  for (int i = 16; i < 25; ++i) {
    const double ramp = (i - 15) / 10.0;  // the fraction interpolated
    EXPECT_NEAR(yarn[i], plain[i] / 16.0 * ramp + plain[i] * (1 - ramp), 1e-6 * plain[i]) << i;
  }
  EXPECT_NEAR(plain[15], 0.0036355385, 1e-9);
}

TEST(Rope, LayerTablesFollowTheCompressRatio) {
  ModelParams p;
  p.vocab_size = 256; p.hidden_size = 128; p.num_hidden_layers = 2; p.num_attention_heads = 2;
  p.head_dim = 512; p.qk_rope_head_dim = 64; p.q_lora_rank = 128; p.o_groups = 1; p.o_lora_rank = 128;
  p.sliding_window = 128; p.compress_ratios = {0, 4, 0}; p.compress_rope_theta = 160000; p.rope_theta = 10000;
  p.rope_factor = 16; p.original_max_position_embeddings = 65536; p.max_position_embeddings = 4096;
  p.index_n_heads = 2; p.index_head_dim = 128; p.index_topk = 4; p.hc_mult = 4; p.hc_sinkhorn_iters = 20;
  p.hc_eps = 1e-6; p.rms_norm_eps = 1e-6; p.n_routed_experts = 4; p.num_experts_per_tok = 2; p.n_shared_experts = 1;
  p.moe_intermediate_size = 128; p.routed_scaling_factor = 1.5; p.swiglu_limit = 10; p.num_hash_layers = 1;
  p.num_nextn_predict_layers = 1;
  const ModelConfig cfg(p, "test");
  EXPECT_EQ(layer_rope_inv_freq(cfg, 0), rope_inv_freq(64, 10000, std::nullopt));
  EXPECT_EQ(layer_rope_inv_freq(cfg, 1), rope_inv_freq(64, 160000, kV4Yarn));
  EXPECT_EQ(layer_rope_inv_freq(cfg, 2), rope_inv_freq(64, 10000, std::nullopt));  // MTP
}

}  // namespace
}  // namespace dsv4
