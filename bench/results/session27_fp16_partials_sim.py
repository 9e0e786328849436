#!/usr/bin/env python3
"""What storing sparse attention's split partials in fp16 (each split's output divided by its row
sum) would add to the output's error, beside what the bf16 output's rounding already costs: a
numpy simulation of one token's 64 heads over 640 entries (window 128 + top-k 512, V4-Flash's CSA)
in splits of 128, the sink included; q and the entry rows random bf16, N(0, s) for a few scales.

Reference: float64 softmax(q k / sqrt(512)) v with the sink. Today's merge: fp32 partials (each
split's unnormalised sums, its max and sum), merged as merge_splits does. The candidate: each
split stores o_z / l_z rounded to fp16, merged as sum_z (w_z l_z) fp16(o_z / l_z) / den. Errors
are relative to the reference row's largest magnitude, before and after the bf16 rounding of the
output; the bf16 rounding alone is the bar. Usage: fp16_partials_sim.py [trials]
"""
import sys
import numpy as np

rng = np.random.default_rng(27)
H, D, E, SPLIT = 64, 512, 640, 128
trials = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def bf16(x):
    """Round float32 to bf16 (nearest even), back in float32."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def run(scale):
    stats = {"fp32 merge": [], "fp16 partials": [], "bf16 output alone": [], "fp32 merge, bf16 out": [],
             "fp16 partials, bf16 out": []}
    for _ in range(trials):
        q = bf16(rng.normal(0, scale, (H, D)).astype(np.float32))
        kv = bf16(rng.normal(0, scale, (E, D)).astype(np.float32))
        sink = rng.normal(0, 1, H).astype(np.float32)
        s = (q.astype(np.float64) @ kv.T.astype(np.float64)) / np.sqrt(D)
        m = np.maximum(s.max(1), sink)
        p = np.exp(s - m[:, None])
        ref = (p @ kv.astype(np.float64)) / (p.sum(1) + np.exp(sink - m))[:, None]
        # fp32 splits (the MMA sums in fp32 are modelled by float32 matmuls).
        s32 = (q @ kv.T).astype(np.float32) * np.float32(1 / np.sqrt(D))
        parts = []
        for z in range(0, E, SPLIT):
            sz = s32[:, z:z + SPLIT]
            mz = sz.max(1)
            pz = np.exp(sz - mz[:, None]).astype(np.float32)
            parts.append((mz, pz.sum(1, dtype=np.float32), (pz @ kv[z:z + SPLIT]).astype(np.float32)))
        mm = np.max([mz for mz, _, _ in parts], 0)
        w = [np.exp(mz - mm).astype(np.float32) for mz, _, _ in parts]
        den = np.exp(sink - mm).astype(np.float32) + sum(l * wz for (_, l, _), wz in zip(parts, w))
        fp32 = sum(o * wz[:, None] for (_, _, o), wz in zip(parts, w)) / den[:, None]
        fp16 = sum((o / l[:, None]).astype(np.float16).astype(np.float32) * (wz * l)[:, None]
                   for (_, l, o), wz in zip(parts, w)) / den[:, None]
        norm = np.abs(ref).max(1, keepdims=True)
        err = lambda x: float(np.median(np.abs(x - ref) / norm))
        stats["fp32 merge"].append(err(fp32))
        stats["fp16 partials"].append(err(fp16))
        stats["bf16 output alone"].append(err(bf16(ref.astype(np.float32))))
        stats["fp32 merge, bf16 out"].append(err(bf16(fp32)))
        stats["fp16 partials, bf16 out"].append(err(bf16(fp16)))
    return {k: float(np.median(v)) for k, v in stats.items()}


print(f"{trials} tokens of {H} heads x {E} entries, splits of {SPLIT}; median relative error (of the row's largest)")
for scale in (0.5, 1.0, 2.0):
    r = run(scale)
    print(f"q, rows ~ N(0, {scale}): " + ", ".join(f"{k} {v:.2e}" for k, v in r.items()))
