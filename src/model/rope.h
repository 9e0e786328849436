// RoPE frequencies of a layer (MODEL.md §3.2): base rope_theta without YaRN for SWA-only layers
// and the MTP, compress_rope_theta with YaRN interpolation (no mscale) for compressed layers.
// Computed in float32 step by step as DeepSeek's precompute_freqs_cis does, so both references
// rotate by the same angles.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "config/model_config.h"

namespace dsv4 {

struct YarnParams {
  double factor = 1;
  int64_t original_max_position = 0;
  double beta_fast = 32;
  double beta_slow = 1;
};

// The YaRN ramp's end points: low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)),
// rope_dim - 1), with corr(n) = rope_dim * ln(original / (n * 2 pi)) / (2 ln base); high gets
// +0.001 when equal to low.
struct YarnRange {
  double low = 0;
  double high = 0;
};
YarnRange yarn_correction_range(int64_t rope_dim, double base, const YarnParams& yarn);

// inv_freq[i] = base^(-2i / rope_dim), i < rope_dim / 2, then YaRN-interpolated when given.
std::vector<float> rope_inv_freq(int64_t rope_dim, double base, const std::optional<YarnParams>& yarn);

// The table of a layer (0..L-1 main, L.. MTP).
std::vector<float> layer_rope_inv_freq(const ModelConfig& cfg, int64_t layer);

}  // namespace dsv4
