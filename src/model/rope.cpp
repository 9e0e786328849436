// RoPE inverse frequencies with YaRN, in float32 like the official precompute_freqs_cis.
#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dsv4 {

YarnRange yarn_correction_range(int64_t rope_dim, double base, const YarnParams& yarn) {
  auto corr = [&](double rotations) {
    return static_cast<double>(rope_dim) * std::log(static_cast<double>(yarn.original_max_position) /
                                                    (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  YarnRange r;
  r.low = std::max(std::floor(corr(yarn.beta_fast)), 0.0);
  r.high = std::min(std::ceil(corr(yarn.beta_slow)), static_cast<double>(rope_dim - 1));
  if (r.low == r.high) r.high += 0.001;
  return r;
}

std::vector<float> rope_inv_freq(int64_t rope_dim, double base, const std::optional<YarnParams>& yarn) {
  const int64_t half = rope_dim / 2;
  const auto base_f = static_cast<float>(base);
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    f[i] = 1.0f / std::pow(base_f, exponent);
  }
  if (yarn) {
    const YarnRange r = yarn_correction_range(rope_dim, base, *yarn);
    const auto low = static_cast<float>(r.low);
    const auto span = static_cast<float>(r.high - r.low);
    const auto factor = static_cast<float>(yarn->factor);
    for (int64_t i = 0; i < half; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - low) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      f[i] = f[i] / factor * (1.0f - smooth) + f[i] * smooth;
    }
  }
  return f;
}

std::vector<float> layer_rope_inv_freq(const ModelConfig& cfg, int64_t layer) {
  const ModelParams& p = cfg.params();
  if (cfg.compress_ratio(layer) == 0) return rope_inv_freq(p.qk_rope_head_dim, p.rope_theta, std::nullopt);
  std::optional<YarnParams> yarn;
  if (p.original_max_position_embeddings > 0)
    yarn = YarnParams{p.rope_factor, p.original_max_position_embeddings, p.beta_fast, p.beta_slow};
  return rope_inv_freq(p.qk_rope_head_dim, p.compress_rope_theta, yarn);
}

}  // namespace dsv4
