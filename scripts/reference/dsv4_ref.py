# Independent PyTorch reference of the DeepSeek-V4 forward pass (MODEL.md), for one sequence
# prefilled from position 0: embedding, mHC, attention (SWA / CSA / HCA), MoE, head and MTP.
"""Plain, readable PyTorch written from the model specification (docs/MODEL.md is the project's
account of it) and the numerics contract of the C++ CPU reference (scripts/reference/README.md
lists the choices made where the spec leaves one open).

Every tensor is held as float32. In the default mode, values that the official inference code
stores in bf16 are rounded to bf16 where it rounds them (`Numerics.act`), the inputs of FP8 /
FP4-weight linears are FP8-quantised per 1x128 block, and the KV / indexer QAT fake-quant is
applied. In the exact-math mode (`Numerics(exact=True)`) none of that happens: every
intermediate is float32 on exactly dequantised weights.

Shapes: T tokens, n = hc_mult streams, D = hidden, H heads, d = head_dim (512), r = rope dims.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

import quant


# ---------------------------------------------------------------------------------------------
# Configuration (config.json, Hugging Face key style, MODEL.md §1.1)


@dataclass(frozen=True)
class Config:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    head_dim: int
    rope_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window: int
    compress_ratios: tuple
    compress_rope_theta: float
    rope_theta: float
    rope_factor: float
    original_seq_len: int
    beta_fast: float
    beta_slow: float
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    norm_eps: float
    n_experts: int
    n_active_experts: int
    n_shared_experts: int
    moe_inter_dim: int
    scoring_func: str
    norm_topk_prob: bool
    route_scale: float
    swiglu_limit: float
    n_hash_layers: int
    n_mtp_layers: int

    @staticmethod
    def from_json(j: dict) -> "Config":
        rope = j.get("rope_scaling") or {}
        cfg = Config(
            vocab_size=j["vocab_size"],
            dim=j["hidden_size"],
            n_layers=j["num_hidden_layers"],
            n_heads=j["num_attention_heads"],
            head_dim=j["head_dim"],
            rope_dim=j["qk_rope_head_dim"],
            q_lora_rank=j["q_lora_rank"],
            o_groups=j["o_groups"],
            o_lora_rank=j["o_lora_rank"],
            window=j["sliding_window"],
            compress_ratios=tuple(j["compress_ratios"]),
            compress_rope_theta=float(j["compress_rope_theta"]),
            rope_theta=float(j["rope_theta"]),
            rope_factor=float(rope.get("factor", 1.0)),
            original_seq_len=int(rope.get("original_max_position_embeddings", 0)),
            beta_fast=float(rope.get("beta_fast", 32)),
            beta_slow=float(rope.get("beta_slow", 1)),
            index_n_heads=j["index_n_heads"],
            index_head_dim=j["index_head_dim"],
            index_topk=j["index_topk"],
            hc_mult=j["hc_mult"],
            hc_sinkhorn_iters=j["hc_sinkhorn_iters"],
            hc_eps=float(j["hc_eps"]),
            norm_eps=float(j["rms_norm_eps"]),
            n_experts=j["n_routed_experts"],
            n_active_experts=j["num_experts_per_tok"],
            n_shared_experts=j["n_shared_experts"],
            moe_inter_dim=j["moe_intermediate_size"],
            scoring_func=j.get("scoring_func", "sqrtsoftplus"),
            norm_topk_prob=bool(j.get("norm_topk_prob", True)),
            route_scale=float(j["routed_scaling_factor"]),
            swiglu_limit=float(j["swiglu_limit"]),
            n_hash_layers=j["num_hash_layers"],
            n_mtp_layers=j["num_nextn_predict_layers"],
        )
        if len(cfg.compress_ratios) != cfg.n_layers + cfg.n_mtp_layers:
            raise ValueError(f"compress_ratios has {len(cfg.compress_ratios)} entries, expected "
                             f"num_hidden_layers + num_nextn_predict_layers = {cfg.n_layers + cfg.n_mtp_layers}")
        if cfg.n_shared_experts != 1:
            raise ValueError(f"n_shared_experts = {cfg.n_shared_experts}; the model has exactly one")
        if cfg.scoring_func != "sqrtsoftplus":
            raise ValueError(f"scoring_func {cfg.scoring_func!r}: only sqrtsoftplus is implemented")
        return cfg

    @property
    def nope_dim(self) -> int:
        return self.head_dim - self.rope_dim


# ---------------------------------------------------------------------------------------------
# Checkpoint


class Checkpoint:
    """All tensors of a checkpoint directory (*.safetensors), dequantised to float32 on request.

    A weight with a companion `.scale` is FP8 e4m3 with 128x128 e8m0 block scales, or MXFP4
    (int8 pairs, 1x32 e8m0 scales); others are read as they are (bf16 / fp32 / int)."""

    def __init__(self, model_dir: Path):
        self.dir = Path(model_dir)
        self.config = Config.from_json(json.loads((self.dir / "config.json").read_text()))
        files = sorted(self.dir.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors files in {self.dir}")
        self._raw: dict[str, torch.Tensor] = {}
        for f in files:
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    self._raw[name] = st.get_tensor(name)

    def names(self) -> list[str]:
        return list(self._raw)

    def raw(self, name: str) -> torch.Tensor:
        if name not in self._raw:
            raise KeyError(f"{self.dir}: tensor {name!r} not found")
        return self._raw[name]

    def weight(self, name: str) -> torch.Tensor:
        """The tensor `name` as float32, dequantised exactly when it has a `.scale`."""
        base = name[: -len(".weight")] if name.endswith(".weight") else name
        w = self.raw(name)
        scale_name = base + ".scale"
        if scale_name not in self._raw:
            return w.to(torch.float32)
        scale = self._raw[scale_name]
        if w.dtype == torch.float8_e4m3fn:
            return quant.dequant_fp8_weight(w, scale, name)
        if w.dtype in (torch.int8, torch.uint8):
            return quant.dequant_mxfp4_weight(w, scale, name)
        raise ValueError(f"{name}: weight dtype {w.dtype} with a .scale is neither FP8 nor MXFP4")


# ---------------------------------------------------------------------------------------------
# Numerics


@dataclass(frozen=True)
class Numerics:
    """Default (official inference numerics) or exact-math (float32 everywhere, no quant)."""

    exact: bool = False

    def act(self, x: torch.Tensor) -> torch.Tensor:
        """An activation the official code stores in bf16."""
        return x if self.exact else quant.round_bf16(x)

    def quant_linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Linear with an FP8 or FP4 weight: FP8 1x128 activation quant, fp32 accumulate,
        bf16 out. `w` is the exactly dequantised weight [out, in]."""
        if not self.exact:
            x = quant.fp8_quant_dequant(x, 128)
        return self.act(x @ w.T)

    def bf16_linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Linear with a bf16 weight on a bf16 activation: fp32 accumulate, bf16 out."""
        return self.act(x @ w.T)

    def qat_fp8(self, x: torch.Tensor, block: int) -> torch.Tensor:
        return x if self.exact else quant.round_bf16(quant.fp8_quant_dequant(x, block))

    def qat_fp4(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.exact else quant.round_bf16(quant.fp4_quant_dequant(x, 32))


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, nm: Numerics) -> torch.Tensor:
    """y = w * x * rsqrt(mean(x^2) + eps) over the last dim, computed in fp32 (weight-free when
    weight is None, as in the per-head q norm)."""
    y = x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = weight * y
    return nm.act(y)


# ---------------------------------------------------------------------------------------------
# RoPE (MODEL.md §3.2): interleaved pairs on the last r dims, YaRN on compressed layers only


def rope_frequencies(cfg: Config, compressed: bool) -> torch.Tensor:
    """Per-pair frequencies f_i, i = 0..r/2-1, float32 as the official code computes them."""
    dim = cfg.rope_dim
    base = cfg.compress_rope_theta if compressed else cfg.rope_theta
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if compressed and cfg.original_seq_len > 0:
        def correction_dim(n_rotations: float) -> float:
            return dim * math.log(cfg.original_seq_len / (n_rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(correction_dim(cfg.beta_fast)), 0)
        high = min(math.ceil(correction_dim(cfg.beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        smooth = 1 - ramp
        freqs = freqs / cfg.rope_factor * (1 - smooth) + freqs * smooth
    return freqs


class RopeTable:
    """cos / sin of position * f_i for one layer kind."""

    def __init__(self, cfg: Config, compressed: bool):
        self.freqs = rope_frequencies(cfg, compressed)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.outer(positions.to(torch.float32), self.freqs)  # [P, r/2]
        return torch.cos(angles), torch.sin(angles)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate the pairs (x[2i], x[2i+1]) of x [P, ..., r] by the angles of cos/sin [P, r/2]
    (conjugate rotation when inverse)."""
    extra = x.dim() - cos.dim()
    cos = cos.reshape(cos.shape[0], *([1] * extra), cos.shape[1])
    sin = sin.reshape(sin.shape[0], *([1] * extra), sin.shape[1])
    if inverse:
        sin = -sin
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def rope_last_dims(x: torch.Tensor, cos, sin, rope_dim: int, nm: Numerics, inverse: bool = False) -> torch.Tensor:
    """x with RoPE applied to its last rope_dim dims; the result is stored bf16 (default mode)."""
    rotated = apply_rope(x[..., -rope_dim:], cos, sin, inverse)
    return nm.act(torch.cat([x[..., :-rope_dim], rotated], dim=-1))


# ---------------------------------------------------------------------------------------------
# mHC (MODEL.md §2.4-2.6)


def sinkhorn(c: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """c [..., n, n] logits -> near doubly-stochastic matrix: row softmax + eps, column
    normalise, then (iters - 1) times row then column normalise."""
    c = torch.softmax(c, dim=-1) + eps
    c = c / (c.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(dim=-1, keepdim=True) + eps)
        c = c / (c.sum(dim=-2, keepdim=True) + eps)
    return c


def hc_mixes(x: torch.Tensor, fn: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, n, D] -> (x_flat @ fn.T) * rsqrt(mean(x_flat^2) + eps): [T, fn.shape[0]] fp32."""
    xf = x.reshape(x.shape[0], -1)
    return (xf @ fn.T) * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)


def hc_pre(x, fn, scale, base, cfg: Config, nm: Numerics):
    """x [T, n, D] -> (y [T, D], post [T, n], comb [T, n, n])."""
    n = cfg.hc_mult
    mixes = hc_mixes(x, fn, cfg.norm_eps)  # [T, (2+n)*n]
    pre = torch.sigmoid(mixes[:, :n] * scale[0] + base[:n]) + cfg.hc_eps
    post = 2 * torch.sigmoid(mixes[:, n:2 * n] * scale[1] + base[n:2 * n])
    comb_logits = mixes[:, 2 * n:].reshape(-1, n, n) * scale[2] + base[2 * n:].reshape(n, n)
    comb = sinkhorn(comb_logits, cfg.hc_sinkhorn_iters, cfg.hc_eps)
    y = (pre.unsqueeze(-1) * x).sum(dim=1)
    return nm.act(y), post, comb


def hc_post(a: torch.Tensor, x: torch.Tensor, post: torch.Tensor, comb: torch.Tensor, nm: Numerics) -> torch.Tensor:
    """a [T, D], x [T, n, D] -> x_new[:, j] = post[j] * a + sum_i comb[i, j] * x[:, i]."""
    mixed = (comb.unsqueeze(-1) * x.unsqueeze(2)).sum(dim=1)  # [T, n(j), D]
    return nm.act(post.unsqueeze(-1) * a.unsqueeze(1) + mixed)


def hc_head(x, fn, scale, base, cfg: Config, nm: Numerics) -> torch.Tensor:
    """x [T, n, D] -> [T, D]: sigmoid-weighted sum of the streams (no Sinkhorn)."""
    g = torch.sigmoid(hc_mixes(x, fn, cfg.norm_eps) * scale + base) + cfg.hc_eps  # [T, n]
    return nm.act((g.unsqueeze(-1) * x).sum(dim=1))


# ---------------------------------------------------------------------------------------------
# Compressor (MODEL.md §4) and lightning indexer (§5)


def compress(x: torch.Tensor, w: dict, prefix: str, ratio: int, head_dim: int, rotate: bool,
             rope: RopeTable, cfg: Config, nm: Numerics) -> torch.Tensor:
    """x [T, D] (attention input after attn_norm) -> compressed entries [T // ratio, head_dim].

    Entry j pools block j (tokens j*m .. j*m+m-1); with ratio 4 (overlap) it also pools the
    first half of block j-1's rows. Softmax over rows per channel, then RMSNorm, RoPE at the
    block start position j*m, then QAT: Hadamard + FP4 (indexer, rotate) or FP8 on the nope
    dims (attention)."""
    n_blocks = x.shape[0] // ratio
    if n_blocks == 0:
        return torch.zeros(0, head_dim)
    overlap = ratio == 4
    coff = 2 if overlap else 1
    kv = x @ w[prefix + "wkv.weight"].T  # [T, coff*dc] fp32 (x in fp32, as the official code)
    score = x @ w[prefix + "wgate.weight"].T
    kv = kv[: n_blocks * ratio].reshape(n_blocks, ratio, coff * head_dim)
    score = score[: n_blocks * ratio].reshape(n_blocks, ratio, coff * head_dim) + w[prefix + "ape"]
    if overlap:
        # Rows of entry j: the A half [0:dc] of block j-1 (absent for j = 0), then the B half of block j.
        prev_kv = torch.zeros(n_blocks, ratio, head_dim)
        prev_score = torch.full((n_blocks, ratio, head_dim), float("-inf"))
        prev_kv[1:] = kv[:-1, :, :head_dim]
        prev_score[1:] = score[:-1, :, :head_dim]
        kv = torch.cat([prev_kv, kv[:, :, head_dim:]], dim=1)  # [nb, 2m, dc]
        score = torch.cat([prev_score, score[:, :, head_dim:]], dim=1)
    pooled = (kv * torch.softmax(score, dim=1)).sum(dim=1)  # [nb, dc] fp32
    # The official code casts the pooled fp32 entry to bf16 before the RMSNorm.
    ckv = rms_norm(nm.act(pooled), w[prefix + "norm.weight"], cfg.norm_eps, nm)
    cos, sin = rope.cos_sin(torch.arange(n_blocks) * ratio)
    ckv = rope_last_dims(ckv, cos, sin, cfg.rope_dim, nm)
    if rotate:
        return nm.qat_fp4(nm.act(quant.hadamard(ckv)))
    nope = cfg.head_dim - cfg.rope_dim
    return torch.cat([nm.qat_fp8(ckv[:, :nope], 64), ckv[:, nope:]], dim=1)


def topk_stable(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest scores per row; equal scores go to the lower index."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]


def index_scores(q: torch.Tensor, keys: torch.Tensor, head_w: torch.Tensor, hd: int, nh: int) -> torch.Tensor:
    """I[t, j] = sum_h (w[t, h] * hd^-0.5 * nh^-0.5) * relu(q[t, h] . K[j]) in fp32 (the
    official code keeps these products in bf16; see README.md)."""
    w = head_w * (hd ** -0.5 * nh ** -0.5)
    return (torch.einsum("thd,jd->thj", q, keys).relu() * w.unsqueeze(-1)).sum(dim=1)


def indexer_topk(x: torch.Tensor, qr: torch.Tensor, w: dict, prefix: str, rope: RopeTable,
                 cos: torch.Tensor, sin: torch.Tensor, cfg: Config, nm: Numerics) -> torch.Tensor:
    """CSA top-k: [T, index_topk] compressed-entry ids, the valid ones ascending, then -1.

    I[t, j] = sum_h w[t, h] * relu(q[t, h] . K[j]) over visible entries j < (t+1) // 4."""
    T = x.shape[0]
    nh, hd = cfg.index_n_heads, cfg.index_head_dim
    q = nm.quant_linear(qr, w[prefix + "wq_b.weight"]).reshape(T, nh, hd)
    q = rope_last_dims(q, cos, sin, cfg.rope_dim, nm)
    q = nm.qat_fp4(nm.act(quant.hadamard(q)))
    keys = compress(x, w, prefix + "compressor.", 4, hd, True, rope, cfg, nm)  # [nc, hd]
    n_comp = keys.shape[0]
    head_w = nm.bf16_linear(x, w[prefix + "weights_proj.weight"])  # [T, nh], bf16 out
    index = index_scores(q, keys, head_w, hd, nh)  # [T, nc]
    visible = compressed_visible(T, n_comp, 4)
    index = index.masked_fill(~visible, float("-inf"))
    k = min(cfg.index_topk, n_comp)
    chosen = topk_stable(index, k)
    chosen_visible = torch.gather(visible, 1, chosen)
    chosen = torch.where(chosen_visible, chosen, torch.full_like(chosen, n_comp))
    chosen = torch.sort(chosen, dim=-1).values  # valid ids ascending, invalid (= n_comp) last
    chosen = torch.where(chosen == n_comp, -1, chosen)
    out = torch.full((T, cfg.index_topk), -1, dtype=torch.int64)
    out[:, :k] = chosen
    return out


# ---------------------------------------------------------------------------------------------
# Attention (MODEL.md §3)


def window_mask(T: int, window: int) -> torch.Tensor:
    """[T(query), T(key)]: query p sees the raw tokens max(0, p-W+1) .. p."""
    p = torch.arange(T)
    return (p.unsqueeze(0) <= p.unsqueeze(1)) & (p.unsqueeze(0) > p.unsqueeze(1) - window)


def compressed_visible(T: int, n_comp: int, ratio: int) -> torch.Tensor:
    """[T, n_comp]: entry j (tokens j*m .. j*m+m-1) is visible to query p iff (j+1)*m <= p+1."""
    return torch.arange(n_comp).unsqueeze(0) < ((torch.arange(T) + 1) // ratio).unsqueeze(1)


def sparse_attention(q: torch.Tensor, kv: torch.Tensor, mask: torch.Tensor, sink: torch.Tensor,
                     cfg: Config, nm: Numerics) -> torch.Tensor:
    """q [T, H, d], kv [N, d] (K = V), mask [T, N] -> o [T, H, d]; the per-head sink logit joins
    the softmax denominator with a zero value."""
    z = torch.einsum("thd,nd->thn", q, kv) * cfg.head_dim ** -0.5
    z = z.masked_fill(~mask.unsqueeze(1), float("-inf"))
    m = z.max(dim=-1, keepdim=True).values  # every query sees at least itself
    e = torch.exp(z - m)
    den = e.sum(dim=-1, keepdim=True) + torch.exp(sink.reshape(1, -1, 1) - m)
    return nm.act(torch.einsum("thn,nd->thd", e / den, kv))


def attention(x: torch.Tensor, layer: int, w: dict, prefix: str, rope: RopeTable, cfg: Config,
              nm: Numerics) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x [T, D] (after attn_norm) -> (out [T, D], indexer top-k [T, index_topk] or None)."""
    T = x.shape[0]
    H, d, r = cfg.n_heads, cfg.head_dim, cfg.rope_dim
    ratio = cfg.compress_ratios[layer]
    positions = torch.arange(T)
    cos, sin = rope.cos_sin(positions)

    # Q path (§3.3)
    qr = rms_norm(nm.quant_linear(x, w[prefix + "wq_a.weight"]), w[prefix + "q_norm.weight"], cfg.norm_eps, nm)
    q = nm.quant_linear(qr, w[prefix + "wq_b.weight"]).reshape(T, H, d)
    q = rms_norm(q, None, cfg.norm_eps, nm)
    q = rope_last_dims(q, cos, sin, r, nm)

    # KV path (§3.4): the window entry of every token
    kv = rms_norm(nm.quant_linear(x, w[prefix + "wkv.weight"]), w[prefix + "kv_norm.weight"], cfg.norm_eps, nm)
    kv = rope_last_dims(kv, cos, sin, r, nm)
    kv = torch.cat([nm.qat_fp8(kv[:, : d - r], 64), kv[:, d - r:]], dim=1)

    # Which entries each query sees (§3.5): the window, then compressed entries
    window = window_mask(T, cfg.window)
    topk = None
    if ratio == 0:
        kv_all, mask = kv, window
    else:
        ckv = compress(x, w, prefix + "compressor.", ratio, d, False, rope, cfg, nm)  # [nc, d]
        n_comp = ckv.shape[0]
        if ratio == 4:
            topk = indexer_topk(x, qr, w, prefix + "indexer.", rope, cos, sin, cfg, nm)
            comp_mask = torch.zeros(T, n_comp + 1, dtype=torch.bool)
            comp_mask.scatter_(1, torch.where(topk < 0, n_comp, topk), True)
            comp_mask = comp_mask[:, :n_comp]
        else:
            comp_mask = compressed_visible(T, n_comp, ratio)
        kv_all = torch.cat([kv, ckv], dim=0)
        mask = torch.cat([window, comp_mask], dim=1)
    o = sparse_attention(q, kv_all, mask, w[prefix + "attn_sink"], cfg, nm)  # [T, H, d]

    # Output path (§3.7): inverse RoPE at the query position, grouped wo_a, then wo_b
    o = rope_last_dims(o, cos, sin, r, nm, inverse=True)
    G = cfg.o_groups
    wo_a = w[prefix + "wo_a.weight"].reshape(G, cfg.o_lora_rank, H * d // G)
    z = nm.act(torch.einsum("tgi,gri->tgr", o.reshape(T, G, H * d // G), wo_a))  # [T, G, o_lora]
    out = nm.quant_linear(z.reshape(T, G * cfg.o_lora_rank), w[prefix + "wo_b.weight"])
    return out, topk


# ---------------------------------------------------------------------------------------------
# MoE (MODEL.md §6)


def swiglu_expert(x: torch.Tensor, w1, w2, w3, route_weight: torch.Tensor | None, cfg: Config,
                  nm: Numerics) -> torch.Tensor:
    """x [t, D] -> [t, D]: w2(silu(clamp(w1 x, max=L)) * clamp(w3 x, -L, L) * route_weight)."""
    gate = nm.quant_linear(x, w1)
    up = nm.quant_linear(x, w3)
    limit = cfg.swiglu_limit
    if limit > 0:
        up = torch.clamp(up, -limit, limit)
        gate = torch.clamp(gate, max=limit)
    h = F.silu(gate) * up
    if route_weight is not None:
        h = h * route_weight.unsqueeze(-1)
    return nm.quant_linear(nm.act(h), w2)


def route(x: torch.Tensor, input_ids: torch.Tensor, layer: int, w: dict, prefix: str, cfg: Config):
    """-> (experts [T, k] ascending, weights [T, k] fp32 in the same order)."""
    logits = x @ w[prefix + "gate.weight"].T  # [T, E] fp32
    scores = torch.sqrt(F.softplus(logits))
    if layer < cfg.n_hash_layers:
        experts = w[prefix + "gate.tid2eid"][input_ids].to(torch.int64)
    else:
        experts = topk_stable(scores + w[prefix + "gate.bias"], cfg.n_active_experts)
    weights = torch.gather(scores, 1, experts)
    if cfg.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights * cfg.route_scale
    order = torch.argsort(experts, dim=-1)
    return torch.gather(experts, 1, order), torch.gather(weights, 1, order)


def moe(x: torch.Tensor, input_ids: torch.Tensor, layer: int, w: dict, prefix: str, cfg: Config,
        nm: Numerics):
    """x [T, D] (after ffn_norm) -> (out [T, D], experts [T, k], weights [T, k])."""
    experts, weights = route(x, input_ids, layer, w, prefix, cfg)
    y = torch.zeros_like(x)
    for e in range(cfg.n_experts):
        tokens, slot = torch.where(experts == e)
        if tokens.numel() == 0:
            continue
        ep = f"{prefix}experts.{e}."
        y[tokens] += swiglu_expert(x[tokens], w[ep + "w1.weight"], w[ep + "w2.weight"], w[ep + "w3.weight"],
                                   weights[tokens, slot], cfg, nm)
    sp = prefix + "shared_experts."
    y += swiglu_expert(x, w[sp + "w1.weight"], w[sp + "w2.weight"], w[sp + "w3.weight"], None, cfg, nm)
    return nm.act(y), experts, weights


# ---------------------------------------------------------------------------------------------
# Block and model


@dataclass
class LayerTrace:
    experts: torch.Tensor
    expert_weights: torch.Tensor
    indexer_topk: torch.Tensor | None
    attn_out: torch.Tensor  # [T, D] attention sub-block output (for activation statistics)
    moe_out: torch.Tensor  # [T, D]


class Model:
    """The checkpoint's weights (float32) plus the forward functions."""

    def __init__(self, model_dir: Path):
        ckpt = Checkpoint(model_dir)
        self.cfg = cfg = ckpt.config
        self.embed = ckpt.raw("embed.weight")  # [V, D] bf16, rows converted on lookup
        self.head = ckpt.raw("head.weight")  # [V, D] bf16
        self.w: dict[str, torch.Tensor] = {}
        for name in ckpt.names():
            if name.endswith(".scale") or name in ("embed.weight", "head.weight"):
                continue
            self.w[name] = ckpt.weight(name) if not name.endswith("tid2eid") else ckpt.raw(name)
        self.ropes = {False: RopeTable(cfg, compressed=False), True: RopeTable(cfg, compressed=True)}

    def layer_prefix(self, layer: int) -> str:
        return f"layers.{layer}." if layer < self.cfg.n_layers else f"mtp.{layer - self.cfg.n_layers}."

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed[ids].to(torch.float32)

    def block(self, x: torch.Tensor, input_ids: torch.Tensor, layer: int, nm: Numerics):
        """One decoder block (main layer or MTP layer): x [T, n, D] -> (x_new, LayerTrace)."""
        cfg, w, p = self.cfg, self.w, self.layer_prefix(layer)
        rope = self.ropes[cfg.compress_ratios[layer] > 0]
        h, post, comb = hc_pre(x, w[p + "hc_attn_fn"], w[p + "hc_attn_scale"], w[p + "hc_attn_base"], cfg, nm)
        h = rms_norm(h, w[p + "attn_norm.weight"], cfg.norm_eps, nm)
        attn_out, topk = attention(h, layer, w, p + "attn.", rope, cfg, nm)
        x = hc_post(attn_out, x, post, comb, nm)
        h, post, comb = hc_pre(x, w[p + "hc_ffn_fn"], w[p + "hc_ffn_scale"], w[p + "hc_ffn_base"], cfg, nm)
        h = rms_norm(h, w[p + "ffn_norm.weight"], cfg.norm_eps, nm)
        moe_out, experts, weights = moe(h, input_ids, layer, w, p + "ffn.", cfg, nm)
        x = hc_post(moe_out, x, post, comb, nm)
        return x, LayerTrace(experts, weights, topk, attn_out, moe_out)

    def forward(self, input_ids: torch.Tensor, nm: Numerics):
        """Prefill of one sequence from position 0.

        Returns (layer_inputs: list of [T, n, D] for l = 0..L (the last is the pre-hc_head
        stream), traces: list of LayerTrace, final_hidden [T, D])."""
        cfg = self.cfg
        x = self.embed_ids(input_ids).unsqueeze(1).repeat(1, cfg.hc_mult, 1)  # [T, n, D]
        streams, traces = [x], []
        for layer in range(cfg.n_layers):
            x, trace = self.block(x, input_ids, layer, nm)
            streams.append(x)
            traces.append(trace)
        h = hc_head(x, self.w["hc_head_fn"], self.w["hc_head_scale"], self.w["hc_head_base"], cfg, nm)
        final_hidden = rms_norm(h, self.w["norm.weight"], cfg.norm_eps, nm)
        return streams, traces, final_hidden

    def mtp_forward(self, prev_stream: torch.Tensor, next_ids: torch.Tensor, nm: Numerics, depth: int = 0):
        """MTP module `depth` (MODEL.md §10.1): the main model's pre-hc_head stream at positions
        0..T-1 [T, n, D] plus the ids of the next tokens [T] -> (final_hidden [T, D], trace)."""
        cfg, w, p = self.cfg, self.w, f"mtp.{depth}."
        e = rms_norm(self.embed_ids(next_ids), w[p + "enorm.weight"], cfg.norm_eps, nm)
        hx = rms_norm(prev_stream, w[p + "hnorm.weight"], cfg.norm_eps, nm)
        e_proj = nm.quant_linear(e, w[p + "e_proj.weight"])  # [T, D]
        h_proj = nm.quant_linear(hx, w[p + "h_proj.weight"])  # [T, n, D]
        x = nm.act(e_proj.unsqueeze(1) + h_proj)
        x, trace = self.block(x, next_ids, cfg.n_layers + depth, nm)
        h = hc_head(x, w[p + "hc_head_fn"], w[p + "hc_head_scale"], w[p + "hc_head_base"], cfg, nm)
        return rms_norm(h, w[p + "norm.weight"], cfg.norm_eps, nm), trace

    def logits(self, final_hidden: torch.Tensor, chunk: int = 16384) -> torch.Tensor:
        """final_hidden [T, D] @ head^T in fp32 -> [T, V]."""
        parts = [final_hidden @ self.head[i:i + chunk].to(torch.float32).T
                 for i in range(0, self.head.shape[0], chunk)]
        return torch.cat(parts, dim=1)
