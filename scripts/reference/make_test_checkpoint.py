# Writes a small random DeepSeek-V4 checkpoint (config.json + model.safetensors, MODEL.md §7.2
# names, FP8 / MXFP4 formats) for the reference's own tests; goldens come from `dsv4 make-model`.
"""Usage: python3 make_test_checkpoint.py OUT_DIR [--seed S] [--vocab V]

The weights are random with scales chosen so that activations stay of order one. This is not
the C++ `make-model` generator (its weights differ); it only lets the PyTorch reference be
tested without the C++ tool.
"""
import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

import quant

# MODEL.md §13 T1 ("all paths, one of each").
T1_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 1024, "hidden_size": 512, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
    "q_lora_rank": 256, "o_groups": 2, "o_lora_rank": 128, "sliding_window": 128,
    "compress_ratios": [0, 4, 128, 4, 0],
    "compress_rope_theta": 160000, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 4096,
    "index_n_heads": 4, "index_head_dim": 128, "index_topk": 16,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "moe_intermediate_size": 256, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
    "norm_topk_prob": True, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
    "num_hash_layers": 1, "num_nextn_predict_layers": 1, "expert_dtype": "fp4",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                            "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
    "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def e8m0_bytes(scale: torch.Tensor) -> torch.Tensor:
    """Power-of-two float32 scales -> float8_e8m0fnu tensor."""
    return (quant.ceil_log2(scale) + 127).to(torch.uint8).view(torch.float8_e8m0fnu)


def quantise_fp8_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 [out, in] (multiples of 128) -> (e4m3 weight, e8m0 128x128 block scales)."""
    out_f, in_f = w.shape
    blocks = w.reshape(out_f // 128, 128, in_f // 128, 128)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-12)
    scale = quant.pow2(quant.ceil_log2(amax / quant.FP8_MAX))
    q = quant.round_e4m3(blocks / scale).reshape(out_f, in_f)
    return q.to(torch.float8_e4m3fn), e8m0_bytes(scale.reshape(out_f // 128, in_f // 128))


def quantise_mxfp4_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 [out, in] -> (int8 [out, in/2] packed e2m1, even element low; e8m0 [out, in/32])."""
    out_f, in_f = w.shape
    blocks = w.reshape(out_f, in_f // 32, 32)
    amax = blocks.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
    scale = quant.pow2(quant.ceil_log2(amax / quant.FP4_MAX))
    q = quant.round_e2m1(blocks / scale).reshape(out_f, in_f)
    magnitudes = torch.tensor(quant.E2M1_MAGNITUDES)
    codes = (q.abs().unsqueeze(-1) == magnitudes).to(torch.int64).argmax(dim=-1)
    codes = codes | ((q < 0).to(torch.int64) << 3)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.to(torch.uint8).view(torch.int8), e8m0_bytes(scale.reshape(out_f, in_f // 32))


def make_checkpoint(out_dir: Path, config: dict, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    c = config
    D, n = c["hidden_size"], c["hc_mult"]
    H, d = c["num_attention_heads"], c["head_dim"]
    G, o_lora, q_lora = c["o_groups"], c["o_lora_rank"], c["q_lora_rank"]
    E, k, inter = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    t: dict[str, torch.Tensor] = {}

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=g) * std

    def bf16(name, *shape, std=1.0, mean=0.0):
        t[name] = (randn(*shape, std=std) + mean).to(torch.bfloat16)

    def fp32(name, *shape, std=1.0):
        t[name] = randn(*shape, std=std)

    def fp8_linear(name, out_f, in_f):
        t[name + ".weight"], t[name + ".scale"] = quantise_fp8_weight(randn(out_f, in_f, std=in_f ** -0.5))

    def fp4_linear(name, out_f, in_f):
        t[name + ".weight"], t[name + ".scale"] = quantise_mxfp4_weight(randn(out_f, in_f, std=in_f ** -0.5))

    def hc(prefix, rows, scale_len):
        fp32(prefix + "_fn", rows, n * D, std=(n * D) ** -0.5)
        fp32(prefix + "_base", rows, std=0.5)
        t[prefix + "_scale"] = torch.full((scale_len,), 0.5)

    def compressor(prefix, ratio, dc):
        coff = 2 if ratio == 4 else 1
        bf16(prefix + "wkv.weight", coff * dc, D, std=D ** -0.5)
        bf16(prefix + "wgate.weight", coff * dc, D, std=D ** -0.5)
        fp32(prefix + "ape", ratio, coff * dc, std=0.1)
        bf16(prefix + "norm.weight", dc, std=0.05, mean=1.0)

    def block(p, layer):
        ratio = c["compress_ratios"][layer]
        bf16(p + "attn_norm.weight", D, std=0.05, mean=1.0)
        bf16(p + "ffn_norm.weight", D, std=0.05, mean=1.0)
        hc(p + "hc_attn", (2 + n) * n, 3)
        hc(p + "hc_ffn", (2 + n) * n, 3)
        a = p + "attn."
        fp8_linear(a + "wq_a", q_lora, D)
        bf16(a + "q_norm.weight", q_lora, std=0.05, mean=1.0)
        fp8_linear(a + "wq_b", H * d, q_lora)
        fp8_linear(a + "wkv", d, D)
        bf16(a + "kv_norm.weight", d, std=0.05, mean=1.0)
        fp8_linear(a + "wo_a", G * o_lora, H * d // G)
        fp8_linear(a + "wo_b", D, G * o_lora)
        fp32(a + "attn_sink", H)
        if ratio > 0:
            compressor(a + "compressor.", ratio, d)
        if ratio == 4:
            nh, hd = c["index_n_heads"], c["index_head_dim"]
            fp8_linear(a + "indexer.wq_b", nh * hd, q_lora)
            bf16(a + "indexer.weights_proj.weight", nh, D, std=D ** -0.5)
            compressor(a + "indexer.compressor.", 4, hd)
        f = p + "ffn."
        bf16(f + "gate.weight", E, D, std=D ** -0.5)
        if layer < c["num_hash_layers"]:
            t[f + "gate.tid2eid"] = torch.stack(
                [torch.randperm(E, generator=g)[:k] for _ in range(c["vocab_size"])])
        else:
            fp32(f + "gate.bias", E, std=0.1)
        for e in range(E):
            fp4_linear(f"{f}experts.{e}.w1", inter, D)
            fp4_linear(f"{f}experts.{e}.w2", D, inter)
            fp4_linear(f"{f}experts.{e}.w3", inter, D)
        fp8_linear(f + "shared_experts.w1", inter, D)
        fp8_linear(f + "shared_experts.w2", D, inter)
        fp8_linear(f + "shared_experts.w3", inter, D)

    bf16("embed.weight", c["vocab_size"], D)
    bf16("head.weight", c["vocab_size"], D, std=D ** -0.5)
    bf16("norm.weight", D, std=0.05, mean=1.0)
    hc("hc_head", n, 1)
    L = c["num_hidden_layers"]
    for layer in range(L):
        block(f"layers.{layer}.", layer)
    for depth in range(c["num_nextn_predict_layers"]):
        p = f"mtp.{depth}."
        block(p, L + depth)
        fp8_linear(p + "e_proj", D, D)
        fp8_linear(p + "h_proj", D, D)
        for norm in ("enorm", "hnorm", "norm"):
            bf16(p + norm + ".weight", D, std=0.05, mean=1.0)
        hc(p + "hc_head", n, 1)

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(t, str(out_dir / "model.safetensors"), metadata={"generator": "make_test_checkpoint.py"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=T1_CONFIG["vocab_size"])
    args = ap.parse_args()
    make_checkpoint(args.out, {**T1_CONFIG, "vocab_size": args.vocab}, args.seed)


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
