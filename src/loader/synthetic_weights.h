// Deterministic random weights for a DeepSeek-V4 checkpoint (what `dsv4 make-model` writes):
// every tensor is a function of (seed, tensor name) alone, identical on every platform, stored in
// the released formats and scaled so activations stay of order one through the network.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "config/model_config.h"
#include "core/tensor.h"
#include "loader/weights.h"

namespace dsv4 {

// A counter-based random stream (the bits of core/counter_bits.h): the value at a counter depends
// only on (seed, name, counter), so tensors can be made in any order, or in pieces, with the same
// result.
//   key       = mix(seed ^ mix(fnv1a64(name)))
//   bits(k)   = mix(key + (k + 1) * 0x9E3779B97F4A7C15)   (splitmix64's step and finaliser "mix")
//   uniform   = ((bits >> 11) + 0.5) * 2^-53, in (0, 1)
//   normal(i) = Box-Muller on the pair p = i / 2 with u1 = uniform(2p), u2 = uniform(2p + 1):
//               sqrt(-2 ln u1) * cos(2 pi u2) for even i, * sin(2 pi u2) for odd i.
// ln, cos and sin are evaluated by fixed polynomials in double with + - * / only (sqrt is
// correctly rounded by IEEE 754), so no libm difference between platforms or CPU variants can
// change a value; their error (< 1e-11 relative) is far below float precision. The file is
// compiled with -ffp-contract=off so no compiler fuses a multiply-add differently.
class CounterRng {
 public:
  CounterRng(uint64_t seed, std::string_view name);

  uint64_t bits(uint64_t counter) const;
  double uniform(uint64_t counter) const;
  // normal(first), normal(first + 1), ... into out.
  void fill_normal(uint64_t first, std::span<float> out) const;

 private:
  uint64_t key_;
};

// The values of one entry of expected_tensors(): for a kFp8 / kMxfp4 weight also its ".scale"
// (the entry that follows it). Scale entries themselves are not synthesised on their own.
struct SyntheticTensor {
  Tensor data;
  std::optional<Tensor> scale;
};

// How each kind of tensor is drawn (z ~ N(0, 1) from CounterRng(seed, name)); the aim is that a
// forward pass keeps activations of order one:
// - linear weights [out, in] (FP8, MXFP4 and bf16 alike: attention, indexer, compressor, experts,
//   gate, e_proj/h_proj, head): z / sqrt(in), so a unit-RMS input gives a unit-RMS output; then
//   quantised to the stored format with DeepSeek's pow2 scales (FP8: per 128x128 tile,
//   2^ceil(log2(amax/448)); MXFP4: per 32 inputs, 2^ceil(log2(amax/6))).
// - embed.weight: z (unit-RMS token embeddings).
// - RMSNorm weights: 1 + 0.05 z.
// - hc_*_fn [m, n*D]: z / sqrt(n*D): hc_pre multiplies by 1/RMS(X), so the mixes are ~N(0, 1).
// - hc_*_scale: 0.5 + 0.05 z (the mixes move pre/post/comb moderately around their bases).
// - hc_*_base (MODEL.md §2.4), each + 0.1 z: pre part ln(1/(n-1)), so sigmoid = 1/n and the n
//   pre weights sum to about 1; post part 0, so post = 2 sigmoid(0) = 1; comb part +1 on the
//   diagonal and 0 elsewhere, so Sinkhorn yields a doubly stochastic mix that favours keeping each
//   stream. hc_head_base: ln(1/(n-1)), so hc_head takes about the mean of the streams.
// - attn.attn_sink: 0.5 z (a sink logit of the size of the q.k/sqrt(512) logits).
// - compressor ape: 0.1 z. ffn.gate.bias: 0.02 z (nudges the top-k choice only).
// - ffn.gate.tid2eid [vocab, k]: k distinct experts per token id (partial Fisher-Yates).
// With post ~ 1 every sub-layer adds an O(1) output to the residual streams, so their RMS grows
// like sqrt(1 + number of sub-layers), as in any pre-norm transformer; every consumer of the
// streams normalises them first.
SyntheticTensor synthesize_tensor(const ModelConfig& cfg, const ExpectedTensor& entry, uint64_t seed);

// The standard deviation of the linear weights and the embedding above (the bulk of a
// checkpoint's bytes): 1/sqrt(in) for a linear [out, in] (an MXFP4 one packs two inputs a byte),
// 1 for embed.weight; nullopt for every other tensor. Dummy weights (--load-format dummy) draw
// these tensors on the backend with the same spread.
std::optional<float> linear_weight_std(const ExpectedTensor& entry);

}  // namespace dsv4
