// The checkpoint naming scheme of MODEL.md §7.2 with the shapes and dtypes of §2.3-§6.1 and
// §10.1, dequantisation of FP8 block-scaled and MXFP4 weights, and the lossless FP4 -> FP8 cast.
#include "loader/weights.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/numeric.h"

namespace dsv4 {

namespace {

constexpr int64_t kFp8Block = 128;  // FP8 weights: one e8m0 scale per 128x128 tile
constexpr int64_t kFp4Block = 32;   // MXFP4 weights: one e8m0 scale per 32 inputs of a row

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Appends the tensors of a checkpoint in order, naming each under the current prefix.
class TensorListBuilder {
 public:
  explicit TensorListBuilder(std::vector<ExpectedTensor>& out) : out_(out) {}

  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

  void plain(const std::string& name, DType dtype, Shape shape) {
    out_.push_back({{prefix_ + name, dtype, std::move(shape)}, WeightFormat::kPlain});
  }
  // "<name>.weight" e4m3 [out, in] and "<name>.scale" e8m0 [ceil(out/128), ceil(in/128)].
  void fp8(const std::string& name, int64_t out, int64_t in) {
    out_.push_back({{prefix_ + name + ".weight", DType::kF8E4M3, {out, in}}, WeightFormat::kFp8});
    plain(name + ".scale", DType::kF8E8M0, {ceil_div(out, kFp8Block), ceil_div(in, kFp8Block)});
  }
  // "<name>.weight" I8 [out, in/2] (packed e2m1 pairs) and "<name>.scale" e8m0 [out, in/32].
  void mxfp4(const std::string& name, int64_t out, int64_t in) {
    out_.push_back({{prefix_ + name + ".weight", DType::kI8, {out, in / 2}}, WeightFormat::kMxfp4});
    plain(name + ".scale", DType::kF8E8M0, {out, in / kFp4Block});
  }
  void bf16_linear(const std::string& name, int64_t out, int64_t in) {
    plain(name + ".weight", DType::kBF16, {out, in});
  }
  void norm(const std::string& name, int64_t dim) { plain(name + ".weight", DType::kBF16, {dim}); }

 private:
  std::vector<ExpectedTensor>& out_;
  std::string prefix_;
};

// §2.3: the mHC mixing parameters of one sub-block ("attn" or "ffn").
void add_hc_mix(TensorListBuilder& b, const ModelConfig& cfg, const std::string& which) {
  const int64_t n = cfg->hc_mult;
  const int64_t mix = (2 + n) * n;
  b.plain("hc_" + which + "_fn", DType::kF32, {mix, n * cfg->hidden_size});
  b.plain("hc_" + which + "_base", DType::kF32, {mix});
  b.plain("hc_" + which + "_scale", DType::kF32, {3});
}

// §2.3 / §2.6: the hc_head parameters (top level, or under "mtp.{k}.").
void add_hc_head(TensorListBuilder& b, const ModelConfig& cfg) {
  const int64_t n = cfg->hc_mult;
  b.plain("hc_head_fn", DType::kF32, {n, n * cfg->hidden_size});
  b.plain("hc_head_base", DType::kF32, {n});
  b.plain("hc_head_scale", DType::kF32, {1});
}

// §4.1: a compressor of head dim `dc` pooling `ratio` tokens (overlapping halves when ratio 4).
void add_compressor(TensorListBuilder& b, const ModelConfig& cfg, const std::string& name,
                    int64_t ratio, int64_t dc) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  b.bf16_linear(name + ".wkv", coff * dc, cfg->hidden_size);
  b.bf16_linear(name + ".wgate", coff * dc, cfg->hidden_size);
  b.plain(name + ".ape", DType::kF32, {ratio, coff * dc});
  b.norm(name + ".norm", dc);
}

// §3.1, §4.1, §5.1: the attention of one layer.
void add_attention(TensorListBuilder& b, const ModelConfig& cfg, int64_t layer) {
  const ModelParams& p = cfg.params();
  const int64_t d = p.hidden_size;
  const int64_t hd = p.head_dim;
  b.fp8("attn.wq_a", p.q_lora_rank, d);
  b.norm("attn.q_norm", p.q_lora_rank);
  b.fp8("attn.wq_b", p.num_attention_heads * hd, p.q_lora_rank);
  b.fp8("attn.wkv", hd, d);
  b.norm("attn.kv_norm", hd);
  b.fp8("attn.wo_a", p.o_groups * p.o_lora_rank, p.num_attention_heads * hd / p.o_groups);
  b.fp8("attn.wo_b", d, p.o_groups * p.o_lora_rank);
  b.plain("attn.attn_sink", DType::kF32, {p.num_attention_heads});
  const int64_t ratio = cfg.compress_ratio(layer);
  if (ratio > 0) add_compressor(b, cfg, "attn.compressor", ratio, hd);
  if (ratio == 4) {
    b.fp8("attn.indexer.wq_b", p.index_n_heads * p.index_head_dim, p.q_lora_rank);
    b.bf16_linear("attn.indexer.weights_proj", p.index_n_heads, d);
    add_compressor(b, cfg, "attn.indexer.compressor", 4, p.index_head_dim);
  }
}

// §6.1: the MoE of one layer: gate (hash table or score-correction bias), routed and shared experts.
void add_moe(TensorListBuilder& b, const ModelConfig& cfg, int64_t layer) {
  const ModelParams& p = cfg.params();
  const int64_t d = p.hidden_size;
  const int64_t inter = p.moe_intermediate_size;
  b.bf16_linear("ffn.gate", p.n_routed_experts, d);
  if (cfg.is_hash_layer(layer)) {
    b.plain("ffn.gate.tid2eid", DType::kI64, {p.vocab_size, p.num_experts_per_tok});
  } else {
    b.plain("ffn.gate.bias", DType::kF32, {p.n_routed_experts});
  }
  for (int64_t e = 0; e < p.n_routed_experts; ++e) {
    const std::string ex = "ffn.experts." + std::to_string(e);
    if (p.expert_dtype == ExpertDType::kFp4) {
      b.mxfp4(ex + ".w1", inter, d);
      b.mxfp4(ex + ".w2", d, inter);
      b.mxfp4(ex + ".w3", inter, d);
    } else {
      b.fp8(ex + ".w1", inter, d);
      b.fp8(ex + ".w2", d, inter);
      b.fp8(ex + ".w3", inter, d);
    }
  }
  b.fp8("ffn.shared_experts.w1", inter, d);
  b.fp8("ffn.shared_experts.w2", d, inter);
  b.fp8("ffn.shared_experts.w3", inter, d);
}

// One decoder block (main or MTP): norms, mHC mixes, attention, MoE.
void add_block(TensorListBuilder& b, const ModelConfig& cfg, int64_t layer) {
  b.norm("attn_norm", cfg->hidden_size);
  b.norm("ffn_norm", cfg->hidden_size);
  add_hc_mix(b, cfg, "attn");
  add_hc_mix(b, cfg, "ffn");
  add_attention(b, cfg, layer);
  add_moe(b, cfg, layer);
}

void check_rank2(ConstTensorView t, DType dtype, const std::string& name, const char* role) {
  if (t.dtype() != dtype || t.rank() != 2)
    throw TensorError(name + ": " + role + " must be a rank-2 " + std::string(dtype_name(dtype)) +
                      " tensor, got " + std::string(dtype_name(t.dtype())) + " " +
                      shape_str(t.shape()));
}

void check_scale_shape(ConstTensorView scale, const Shape& expected, const std::string& name) {
  if (scale.shape() != expected)
    throw TensorError(name + ": scale shape " + shape_str(scale.shape()) + " does not match the " +
                      "weight (expected " + shape_str(expected) + ")");
}

void check_out_size(std::span<float> out, int64_t numel, const std::string& name) {
  if (static_cast<int64_t>(out.size()) != numel)
    throw TensorError(name + ": output buffer holds " + std::to_string(out.size()) +
                      " floats, the weight has " + std::to_string(numel));
}

// Packed e2m1 pairs arrive as I8 (the checkpoint's spelling), U8 or the engine's own kE2M1x2.
void check_packed_fp4(ConstTensorView w, const std::string& name) {
  const DType t = w.dtype();
  if ((t != DType::kI8 && t != DType::kU8 && t != DType::kE2M1x2) || w.rank() != 2)
    throw TensorError(name + ": MXFP4 weight must be a rank-2 i8 tensor of packed e2m1 pairs, got " +
                      std::string(dtype_name(t)) + " " + shape_str(w.shape()));
}

// Checks an MXFP4 weight and its per-32 scales; returns the logical [rows, cols].
std::pair<int64_t, int64_t> check_mxfp4(ConstTensorView w, ConstTensorView scale, const std::string& name) {
  check_packed_fp4(w, name);
  check_rank2(scale, DType::kF8E8M0, name, "MXFP4 scale");
  const int64_t rows = w.dim(0);
  const int64_t cols = 2 * w.dim(1);
  if (cols % kFp4Block != 0)
    throw TensorError(name + ": MXFP4 weight has " + std::to_string(cols) +
                      " inputs per row, not a multiple of 32");
  check_scale_shape(scale, {rows, cols / kFp4Block}, name);
  return {rows, cols};
}

// The value of every e4m3 code and of every e8m0 code, so dequantisation is a table look-up.
struct CodeTables {
  std::array<float, 256> e4m3{};
  std::array<float, 256> e8m0{};
};
const CodeTables& code_tables() {
  static const CodeTables tables = [] {
    CodeTables t;
    for (int c = 0; c < 256; ++c) {
      t.e4m3[static_cast<size_t>(c)] = e4m3_to_float(static_cast<uint8_t>(c));
      t.e8m0[static_cast<size_t>(c)] = e8m0_to_float(static_cast<uint8_t>(c));
    }
    return t;
  }();
  return tables;
}

}  // namespace

std::string layer_prefix(const ModelConfig& cfg, int64_t layer) {
  const int64_t num_main = cfg.num_layers();
  if (layer < 0 || layer >= num_main + cfg.num_mtp_layers())
    throw UsageError(cfg.source() + ": layer " + std::to_string(layer) + " out of range (" +
                     std::to_string(num_main) + " main + " + std::to_string(cfg.num_mtp_layers()) +
                     " MTP layers)");
  if (layer < num_main) return "layers." + std::to_string(layer) + ".";
  return "mtp." + std::to_string(layer - num_main) + ".";
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg) {
  std::vector<ExpectedTensor> out;
  TensorListBuilder b(out);
  const int64_t d = cfg->hidden_size;
  b.plain("embed.weight", DType::kBF16, {cfg->vocab_size, d});
  b.plain("head.weight", DType::kBF16, {cfg->vocab_size, d});
  b.norm("norm", d);
  add_hc_head(b, cfg);
  for (int64_t l = 0; l < cfg.num_layers(); ++l) {
    b.set_prefix(layer_prefix(cfg, l));
    add_block(b, cfg, l);
  }
  for (int64_t l = cfg.num_layers(); l < cfg.num_layers() + cfg.num_mtp_layers(); ++l) {
    b.set_prefix(layer_prefix(cfg, l));
    b.fp8("e_proj", d, d);
    b.fp8("h_proj", d, d);
    b.norm("enorm", d);
    b.norm("hnorm", d);
    b.norm("norm", d);
    add_hc_head(b, cfg);
    add_block(b, cfg, l);
  }
  return out;
}

uint64_t expected_checkpoint_bytes(const ModelConfig& cfg) {
  uint64_t total = 0;
  for (const ExpectedTensor& t : expected_tensors(cfg))
    total += static_cast<uint64_t>(shape_numel(t.spec.shape)) * dtype_size(t.spec.dtype);
  return total;
}

CheckpointCheck check_checkpoint(const ModelConfig& cfg, const Checkpoint& ckpt) {
  CheckpointCheck result;
  std::vector<std::string> expected_names;
  for (const ExpectedTensor& t : expected_tensors(cfg)) {
    expected_names.push_back(t.spec.name);
    if (!ckpt.contains(t.spec.name)) {
      result.missing.push_back(t.spec.name);
      continue;
    }
    const TensorInfo& info = ckpt.info(t.spec.name);
    if (info.dtype != t.spec.dtype || info.shape != t.spec.shape)
      result.wrong.push_back({t.spec.name, t.spec.dtype, t.spec.shape, info.dtype, info.shape});
  }
  std::sort(expected_names.begin(), expected_names.end());
  for (const std::string& name : ckpt.tensor_names())
    if (!std::binary_search(expected_names.begin(), expected_names.end(), name))
      result.unexpected.push_back(name);
  return result;
}

void dequant_fp8_block(ConstTensorView w, ConstTensorView scale, std::span<float> out,
                       const std::string& name) {
  check_rank2(w, DType::kF8E4M3, name, "FP8 weight");
  check_rank2(scale, DType::kF8E8M0, name, "FP8 scale");
  const int64_t rows = w.dim(0);
  const int64_t cols = w.dim(1);
  check_scale_shape(scale, {ceil_div(rows, kFp8Block), ceil_div(cols, kFp8Block)}, name);
  check_out_size(out, rows * cols, name);
  const CodeTables& tables = code_tables();
  const uint8_t* codes = w.data<uint8_t>();
  const uint8_t* scales = scale.data<uint8_t>();
  const int64_t scale_cols = scale.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* scale_row = scales + (r / kFp8Block) * scale_cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float s = tables.e8m0[scale_row[c / kFp8Block]];
      out[static_cast<size_t>(r * cols + c)] = tables.e4m3[codes[r * cols + c]] * s;
    }
  }
}

void dequant_mxfp4(ConstTensorView w, ConstTensorView scale, std::span<float> out,
                   const std::string& name) {
  const auto [rows, cols] = check_mxfp4(w, scale, name);
  check_out_size(out, rows * cols, name);
  const CodeTables& tables = code_tables();
  const uint8_t* packed = w.data<uint8_t>();
  const uint8_t* scales = scale.data<uint8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 2) {
      const uint8_t byte = packed[(r * cols + c) / 2];
      const float s = tables.e8m0[scales[r * (cols / kFp4Block) + c / kFp4Block]];
      out[static_cast<size_t>(r * cols + c)] = e2m1_to_float(e2m1x2_low(byte)) * s;
      out[static_cast<size_t>(r * cols + c + 1)] = e2m1_to_float(e2m1x2_high(byte)) * s;
    }
  }
}

Mxfp4BlockShifts mxfp4_block_shifts(ConstTensorView w, ConstTensorView scale, const std::string& name) {
  const auto [rows, cols] = check_mxfp4(w, scale, name);
  const int64_t groups = cols / kFp4Block;
  Mxfp4BlockShifts result{Tensor(DType::kF8E8M0, {ceil_div(rows, kFp8Block), ceil_div(cols, kFp8Block)}),
                          Tensor(DType::kU8, {rows, groups})};
  const uint8_t* scales = scale.data<uint8_t>();
  uint8_t* block_scales = result.block_scale.data<uint8_t>();
  uint8_t* shifts = result.shift.data<uint8_t>();
  const int64_t block_cols = result.block_scale.shape()[1];
  for (int64_t br = 0; br * kFp8Block < rows; ++br) {
    const int64_t r0 = br * kFp8Block;
    const int64_t r1 = std::min(rows, r0 + kFp8Block);
    for (int64_t bc = 0; bc < block_cols; ++bc) {
      const int64_t g0 = bc * kFp8Block / kFp4Block;
      const int64_t g1 = std::min(groups, g0 + kFp8Block / kFp4Block);
      const auto where = [&] {
        return name + ": 128x128 block (" + std::to_string(br) + ", " + std::to_string(bc) + ")";
      };
      int s_max = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t g = g0; g < g1; ++g) {
          const uint8_t s = scales[r * groups + g];
          if (s == kE8M0Nan) throw TensorError(where() + " holds a NaN scale (0xFF) at row " + std::to_string(r));
          s_max = std::max(s_max, static_cast<int>(s));
        }
      if (s_max < kMxfp4MaxShift)
        throw TensorError(where() + ": largest scale 2^" + std::to_string(s_max - 127) +
                          " leaves no room for the block scale 2^-6 below it");
      const int block_code = s_max - kMxfp4MaxShift;
      block_scales[br * block_cols + bc] = static_cast<uint8_t>(block_code);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t g = g0; g < g1; ++g) {
          const int s = scales[r * groups + g];
          if (s < block_code)
            throw TensorError(where() + ": scale 2^" + std::to_string(s - 127) + " at row " +
                              std::to_string(r) + ", inputs " + std::to_string(g * kFp4Block) + ".." +
                              std::to_string(g * kFp4Block + kFp4Block - 1) +
                              " is more than 2^6 below the block's largest 2^" +
                              std::to_string(s_max - 127) + "; the FP8 cast would lose bits");
          shifts[r * groups + g] = static_cast<uint8_t>(s - block_code);
        }
    }
  }
  return result;
}

Fp8BlockWeight cast_mxfp4_to_fp8(ConstTensorView w, ConstTensorView scale, const std::string& name) {
  Mxfp4BlockShifts shifts = mxfp4_block_shifts(w, scale, name);
  const int64_t rows = w.dim(0), cols = 2 * w.dim(1), groups = cols / kFp4Block;
  Fp8BlockWeight result{Tensor(DType::kF8E4M3, {rows, cols}), std::move(shifts.block_scale)};
  const uint8_t* packed = w.data<uint8_t>();
  const uint8_t* shift = shifts.shift.data<uint8_t>();
  uint8_t* codes = result.weight.data<uint8_t>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = packed[(r * cols + c) / 2];
      const uint8_t fp4 = (c % 2 == 0) ? e2m1x2_low(byte) : e2m1x2_high(byte);
      codes[r * cols + c] = float_to_e4m3(ldexpf(e2m1_to_float(fp4), shift[r * groups + c / kFp4Block]));
    }
  return result;
}

}  // namespace dsv4
