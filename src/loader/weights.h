// The DeepSeek-V4 checkpoint as the released files hold it (MODEL.md §7): the name, shape and
// dtype of every tensor for a ModelConfig, dequantisation of FP8 block-scaled and MXFP4
// tensors, and the lossless FP4 -> FP8 cast of §14.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "core/tensor.h"
#include "loader/safetensors.h"

namespace dsv4 {

// How a weight is stored, which decides its companion ".scale" tensor.
enum class WeightFormat {
  kPlain,   // bf16 / fp32 / int64, no scale
  kFp8,     // e4m3 [out, in] + e8m0 scale [ceil(out/128), ceil(in/128)]
  kMxfp4,   // packed e2m1 pairs stored as I8 [out, in/2] + e8m0 scale [out, in/32]
};

// One expected checkpoint tensor. For kFp8/kMxfp4 weights the ".scale" tensor is listed as
// its own entry too (format kPlain, dtype F8_E8M0), right after the weight.
struct ExpectedTensor {
  TensorSpec spec;
  WeightFormat format = WeightFormat::kPlain;
};

// Prefix of a layer's tensors: "layers.{l}." for l < L, "mtp.{l-L}." for MTP layers.
std::string layer_prefix(const ModelConfig& cfg, int64_t layer);

// Every tensor a checkpoint of `cfg` holds, in a fixed order (globals, then each layer, then
// MTP). The routed experts follow cfg's expert_dtype (fp4 -> kMxfp4, fp8 -> kFp8).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg);

// Bytes of tensor data a checkpoint of `cfg` holds (the sum over expected_tensors; safetensors
// headers and the index add a little on top).
uint64_t expected_checkpoint_bytes(const ModelConfig& cfg);

// A checkpoint compared with expected_tensors(cfg).
struct WrongTensor {
  std::string name;
  DType expected_dtype;
  Shape expected_shape;
  DType actual_dtype;
  Shape actual_shape;
};
struct CheckpointCheck {
  std::vector<std::string> missing;     // expected, absent (in expected_tensors order)
  std::vector<WrongTensor> wrong;       // present with another dtype or shape
  std::vector<std::string> unexpected;  // present, not expected (sorted)
  bool ok() const { return missing.empty() && wrong.empty(); }
};
CheckpointCheck check_checkpoint(const ModelConfig& cfg, const Checkpoint& ckpt);

// W[o, i] = e4m3(w[o, i]) * 2^(scale[o/128, i/128] - 127), written to out (row-major [out, in]).
// Checks shapes and dtypes; throws TensorError naming `name`.
void dequant_fp8_block(ConstTensorView w, ConstTensorView scale, std::span<float> out,
                       const std::string& name);

// W[o, i] = e2m1(nibble of w[o, i/2]) * 2^(scale[o, i/32] - 127), low nibble = even i.
void dequant_mxfp4(ConstTensorView w, ConstTensorView scale, std::span<float> out,
                   const std::string& name);

// DeepSeek's lossless cast of an MXFP4 weight to FP8 with 128x128 block scales (MODEL.md §14):
// each 128x128 block's scale is 2^-6 times its largest per-32 scale, and each group of 32 inputs
// keeps its e2m1 values times 2^shift (shift = its scale over the block's, 0..6: at most
// 6 * 2^6 = 384 <= 448, so every value fits e4m3 exactly). Throws TensorError when some per-32
// scale in a block is below s_max / 2^6 (the cast would drop bits).
constexpr int kMxfp4MaxShift = 6;
struct Mxfp4BlockShifts {
  Tensor block_scale;  // e8m0 [ceil(out/128), ceil(in/128)]
  Tensor shift;        // U8 [out, in/32], 0..kMxfp4MaxShift
};
Mxfp4BlockShifts mxfp4_block_shifts(ConstTensorView w, ConstTensorView scale, const std::string& name);

struct Fp8BlockWeight {
  Tensor weight;  // e4m3 [out, in]
  Tensor scale;   // e8m0 [ceil(out/128), ceil(in/128)]
};
Fp8BlockWeight cast_mxfp4_to_fp8(ConstTensorView w, ConstTensorView scale, const std::string& name);

}  // namespace dsv4
