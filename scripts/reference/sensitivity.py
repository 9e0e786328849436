# Measures how sensitive the DeepSeek-V4 forward is to numerics choices, with the comparison of
# MODEL.md §15: per layer with identical inputs (choice flips, relative error) and logits.
"""Usage: python3 sensitivity.py --model DIR [--tokens 300] [--seed S]

Per main layer, on the same input stream (the default run's), compares the default numerics with
the variants below, and the exact-math mode with its f64-accum variant:
  exact        the exact-math mode (no FP8/FP4 activation quantisation, no QAT, fp32 activations)
  bf16-index   the indexer score rounded to bf16 where DeepSeek's inference code rounds it
               (w * scale, q.k, relu * w, head sum), instead of this reference's fp32 score
  bf16-qnorm   the weight-free per-head q RMSNorm in bf16 arithmetic, as the official code does
  f64-accum    every matmul / einsum accumulated in float64 and rounded to float32: a stand-in
               for another correct implementation that sums in a different order
and reports the share of tokens whose expert set / indexer top-k set differs and the relative
Frobenius error of the layer output on the other tokens (per token over n*D, and over the set).
"""
import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsv4_ref as R  # noqa: E402
import quant  # noqa: E402
from make_goldens import seeded_ids  # noqa: E402


def bf16_index_scores(q, keys, head_w, hd, nh):
    """The official Indexer.forward: every product and the head sum are bf16 tensors."""
    b = quant.round_bf16
    w = b(head_w * (hd ** -0.5 * nh ** -0.5))
    s = b(torch.einsum("thd,jd->thj", q, keys)).relu()
    return b(b(s * w.unsqueeze(-1)).sum(dim=1))


@contextmanager
def variant(name: str):
    """Temporarily swaps one numerics choice of dsv4_ref for the official code's bf16 form."""
    saved_index, saved_norm = R.index_scores, R.rms_norm
    saved_matmul, saved_einsum = torch.Tensor.__matmul__, torch.einsum
    if name == "bf16-index":
        R.index_scores = bf16_index_scores
    elif name == "bf16-qnorm":
        def rms_norm(x, weight, eps, nm):
            if weight is not None or nm.exact:
                return saved_norm(x, weight, eps, nm)
            b = quant.round_bf16  # q.square().mean() in bf16, + eps, rsqrt, multiply: all bf16
            return b(x * b(torch.rsqrt(b(b(b(x.square()).mean(dim=-1, keepdim=True)) + eps))))
        R.rms_norm = rms_norm
    elif name == "f64-accum":
        torch.Tensor.__matmul__ = lambda a, b: saved_matmul(a.double(), b.double()).float()
        torch.einsum = lambda eq, *ops: saved_einsum(eq, *(o.double() for o in ops)).float()
    try:
        yield
    finally:
        R.index_scores, R.rms_norm = saved_index, saved_norm
        torch.Tensor.__matmul__, torch.einsum = saved_matmul, saved_einsum


def compare_layer(model, layer, x_in, ids, ref_out, ref_trace, nm):
    out, trace = model.block(x_in, ids, layer, nm)
    expert_diff = (trace.experts != ref_trace.experts).any(dim=-1)
    topk_diff = torch.zeros_like(expert_diff)
    if trace.indexer_topk is not None:
        topk_diff = (trace.indexer_topk != ref_trace.indexer_topk).any(dim=-1)
    agree = ~(expert_diff | topk_diff)
    diff, ref = (out - ref_out).flatten(1).double(), ref_out.flatten(1).double()
    err = diff.norm(dim=-1) / ref.norm(dim=-1)
    err_set = (diff[agree].norm() / ref[agree].norm()).item()  # Frobenius over all agreeing tokens
    return expert_diff.double().mean().item(), topk_diff.double().mean().item(), err[agree], err_set


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = R.Model(args.model)
    ids = seeded_ids(model.cfg.vocab_size, args.tokens, args.seed)
    default, exact = R.Numerics(exact=False), R.Numerics(exact=True)
    runs = {nm: model.forward(ids, nm) for nm in (default, exact)}
    comparisons = (("default", default, "exact", exact), ("default", default, "bf16-index", default),
                   ("default", default, "bf16-qnorm", default), ("default", default, "f64-accum", default),
                   ("exact", exact, "f64-accum", exact))
    for base_name, base, name, nm in comparisons:
        streams, traces, _ = runs[base]
        print(f"{base_name} vs {name}{' (exact-math)' if nm.exact and base_name != 'default' else ''}:")
        with variant(name):
            for layer in range(model.cfg.n_layers):
                e, k, err_tok, err_set = compare_layer(model, layer, streams[layer], ids, streams[layer + 1],
                                                       traces[layer], nm)
                print(f"  layer {layer}: expert sets differ {e:.3f}, top-k sets differ {k:.3f}; on the other "
                      f"tokens rel err per token median {err_tok.median().item():.1e} max {err_tok.max().item():.1e}, "
                      f"over the set {err_set:.1e}")

if __name__ == "__main__":
    main()
