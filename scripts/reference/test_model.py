# Checks of the PyTorch reference model (dsv4_ref.py) on a small random checkpoint (written by
# make_test_checkpoint.py, or $DSV4_REF_MODEL): mHC Sinkhorn, RoPE, compressor, routing, indexer
# top-k, causality, the MTP path, and how far the default numerics are from the exact-math mode.
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsv4_ref as R  # noqa: E402
import make_test_checkpoint  # noqa: E402
from testing import run_tests  # noqa: E402

torch.set_num_threads(2)
T = 96  # > 4 * index_topk = 64 tokens, so the CSA top-k is selective for the last positions
DEFAULT, EXACT = R.Numerics(exact=False), R.Numerics(exact=True)


@lru_cache(1)
def model() -> R.Model:
    """The checkpoint in $DSV4_REF_MODEL (e.g. `dsv4 make-model --preset tiny` output) if set,
    else a small random one of the same geometry written here."""
    if os.environ.get("DSV4_REF_MODEL"):
        return R.Model(Path(os.environ["DSV4_REF_MODEL"]))
    tmp = Path(tempfile.mkdtemp(prefix="dsv4_pyref_"))
    make_test_checkpoint.make_checkpoint(tmp, {**make_test_checkpoint.T1_CONFIG, "vocab_size": 512}, seed=3)
    return R.Model(tmp)


@lru_cache(1)
def token_ids() -> torch.Tensor:
    return torch.randint(0, 512, (T,), generator=torch.Generator().manual_seed(5))


@lru_cache(2)
def run(exact: bool):
    return model().forward(token_ids(), EXACT if exact else DEFAULT)


def test_sinkhorn_is_doubly_stochastic():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 4, 4, generator=g)  # peaked logits (std 3) converge far slower
    c = R.sinkhorn(logits, iters=20, eps=1e-6)
    assert bool((c > 0).all())
    cols, rows = c.sum(dim=-2), c.sum(dim=-1)
    assert torch.allclose(cols, torch.ones_like(cols), atol=1e-5), cols.sub(1).abs().max()  # ends on columns
    assert torch.allclose(rows, torch.ones_like(rows), atol=1e-3), rows.sub(1).abs().max()
    one_iter = R.sinkhorn(logits, iters=1, eps=1e-6)  # softmax rows, then one column normalisation
    assert torch.allclose(one_iter.sum(dim=-2), torch.ones(200, 4), atol=1e-5)
    assert not torch.allclose(one_iter.sum(dim=-1), torch.ones(200, 4), atol=1e-2)
    five_iters = R.sinkhorn(logits, iters=5, eps=1e-6)
    assert (rows - 1).abs().max() < (five_iters.sum(dim=-1) - 1).abs().max() / 10


def test_rope_yarn_frequencies_and_relative_positions():
    cfg = model().cfg
    plain = R.rope_frequencies(cfg, compressed=False)
    yarn = R.rope_frequencies(cfg, compressed=True)
    base = torch.tensor(cfg.compress_rope_theta, dtype=torch.float32)
    assert plain[0] == 1.0 and yarn[0] == 1.0  # the fastest pairs are not interpolated
    assert torch.allclose(yarn[-1], base ** (-62 / 64) / cfg.rope_factor, rtol=1e-6)  # slowest: / factor
    assert torch.allclose(plain[-1], torch.tensor(cfg.rope_theta) ** (-62 / 64), rtol=1e-6)
    table = R.RopeTable(cfg, compressed=True)
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 64, generator=g), torch.randn(1, 64, generator=g)

    def dot(pq, pk):
        cq, sq = table.cos_sin(torch.tensor([pq]))
        ck, sk = table.cos_sin(torch.tensor([pk]))
        return (R.apply_rope(q, cq, sq) * R.apply_rope(k, ck, sk)).sum()

    assert torch.allclose(dot(10, 3), dot(107, 100), atol=1e-4)  # depends on p - s only
    cos, sin = table.cos_sin(torch.tensor([77]))
    assert torch.allclose(R.apply_rope(R.apply_rope(q, cos, sin), cos, sin, inverse=True), q, atol=1e-5)


def test_attention_visibility():
    # MODEL.md §3.5: window of W = 128 raw tokens including p; compressed entry j visible iff
    # (j+1)*m <= p+1.
    win = R.window_mask(300, 128)
    assert win[0].nonzero().flatten().tolist() == [0]
    assert win[127].nonzero().flatten().tolist() == list(range(0, 128))
    assert win[200].nonzero().flatten().tolist() == list(range(73, 201))
    hca = R.compressed_visible(300, 2, 128)
    assert hca[126].tolist() == [False, False] and hca[127].tolist() == [True, False]
    assert hca[255].tolist() == [True, True]
    csa = R.compressed_visible(300, 75, 4)
    assert int(csa[2].sum()) == 0 and int(csa[3].sum()) == 1 and int(csa[299].sum()) == 75


def test_compressor_matches_definition():
    # Entry j of the overlapping ratio-4 compressor pools, per channel, the A half of block j-1's
    # rows and the B half of block j's rows (MODEL.md §4.2); recompute entry 2 row by row.
    m = model()
    cfg, w = m.cfg, m.w
    prefix = "layers.1.attn.compressor."
    g = torch.Generator().manual_seed(2)
    x = torch.randn(13, cfg.dim, generator=g)
    got = R.compress(x, w, prefix, 4, cfg.head_dim, False, m.ropes[True], cfg, EXACT)
    assert got.shape == (3, cfg.head_dim)
    dc, j = cfg.head_dim, 2
    kv = x @ w[prefix + "wkv.weight"].T
    score = x @ w[prefix + "wgate.weight"].T + w[prefix + "ape"].repeat(4, 1)[:13]
    rows_kv = [kv[t, :dc] for t in range(4 * (j - 1), 4 * j)] + [kv[t, dc:] for t in range(4 * j, 4 * j + 4)]
    rows_sc = [score[t, :dc] for t in range(4 * (j - 1), 4 * j)] + [score[t, dc:] for t in range(4 * j, 4 * j + 4)]
    weights = torch.softmax(torch.stack(rows_sc), dim=0)
    pooled = (weights * torch.stack(rows_kv)).sum(dim=0)
    normed = R.rms_norm(pooled, w[prefix + "norm.weight"], cfg.norm_eps, EXACT)
    cos, sin = m.ropes[True].cos_sin(torch.tensor([4 * j]))
    expect = torch.cat([normed[:-64], R.apply_rope(normed[-64:].unsqueeze(0), cos, sin)[0]])
    assert torch.allclose(got[j], expect, atol=1e-5), (got[j] - expect).abs().max()


def test_routing():
    cfg = model().cfg
    _, traces, _ = run(False)
    ids = token_ids()
    tid2eid = model().w["layers.0.ffn.gate.tid2eid"]
    for layer, trace in enumerate(traces):
        e, wt = trace.experts, trace.expert_weights
        assert e.shape == (T, cfg.n_active_experts) and wt.shape == e.shape
        assert bool((e[:, 1:] > e[:, :-1]).all()) and bool(((e >= 0) & (e < cfg.n_experts)).all())
        assert torch.allclose(wt.sum(-1), torch.full((T,), cfg.route_scale), atol=1e-5)
        assert bool((wt > 0).all())
        if layer < cfg.n_hash_layers:
            assert torch.equal(e, torch.sort(tid2eid[ids].long(), dim=-1).values)


def test_indexer_topk_sets():
    cfg = model().cfg
    _, traces, _ = run(False)
    csa_layers = [l for l in range(cfg.n_layers) if cfg.compress_ratios[l] == 4]
    assert csa_layers == [1, 3]
    for layer, trace in enumerate(traces):
        if layer not in csa_layers:
            assert trace.indexer_topk is None
            continue
        topk = trace.indexer_topk
        assert topk.shape == (T, cfg.index_topk)
        for t in range(T):
            visible = (t + 1) // 4
            valid = topk[t][topk[t] >= 0]
            assert valid.numel() == min(cfg.index_topk, visible), (layer, t)
            assert bool((topk[t][valid.numel():] == -1).all())
            assert bool((valid < visible).all()) and bool((valid[1:] > valid[:-1]).all())
        assert (topk[T - 1] >= 0).sum() == cfg.index_topk and (T // 4) > cfg.index_topk  # truly selective


def test_causal_prefix_consistency():
    # A prefix of the sequence must give the same results as the first rows of the full run
    # (window, compressed-entry visibility and the indexer mask are all causal).
    full_streams, full_traces, full_hidden = run(True)
    n = 61
    streams, traces, hidden = model().forward(token_ids()[:n], EXACT)
    assert torch.allclose(hidden, full_hidden[:n], rtol=1e-4, atol=1e-4), (hidden - full_hidden[:n]).abs().max()
    for layer in range(len(traces)):
        assert torch.equal(traces[layer].experts, full_traces[layer].experts[:n])
        if traces[layer].indexer_topk is not None:
            assert torch.equal(traces[layer].indexer_topk, full_traces[layer].indexer_topk[:n])


def test_mtp_and_main_paths_run():
    cfg = model().cfg
    streams, _, hidden = run(False)
    assert len(streams) == cfg.n_layers + 1 and streams[0].shape == (T, cfg.hc_mult, cfg.dim)
    assert hidden.shape == (T, cfg.dim) and bool(torch.isfinite(hidden).all())
    # default-mode activations hold bf16 values
    assert torch.equal(streams[-1], streams[-1].to(torch.bfloat16).float())
    mtp_hidden, trace = model().mtp_forward(streams[-1][:-1], token_ids()[1:], DEFAULT)
    assert mtp_hidden.shape == (T - 1, cfg.dim) and bool(torch.isfinite(mtp_hidden).all())
    assert trace.indexer_topk is None  # the MTP layer is SWA-only
    logits = model().logits(mtp_hidden)
    assert logits.shape == (T - 1, cfg.vocab_size)


def test_default_and_exact_math_agree_loosely():
    _, _, hidden = run(False)
    _, _, exact_hidden = run(True)
    cos = torch.nn.functional.cosine_similarity(model().logits(hidden), model().logits(exact_hidden), dim=-1)
    assert cos.median() > 0.99, cos.median()
    assert not torch.equal(hidden, exact_hidden)  # the modes really differ


if __name__ == "__main__":
    run_tests(dict(globals()))
