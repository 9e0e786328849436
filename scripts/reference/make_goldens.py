# Writes the golden safetensors file of the C++ reference tests (contract in README.md): the
# PyTorch reference's streams, routing, indexer top-k and final hidden states for seeded ids.
"""Usage: python3 make_goldens.py --model DIR --out FILE [--tokens 300] [--seed S] [--preset NAME]

Runs one-shot prefills of T seeded token ids through the checkpoint in DIR, in the default
numerics and in the exact-math mode, plus the MTP module, and writes FILE. Prints the
activation scale per layer and how far the default run's logits are from the exact run's.
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsv4_ref  # noqa: E402


def seeded_ids(vocab_size: int, tokens: int, seed: int) -> torch.Tensor:
    """The golden token ids: uniform over the vocabulary from torch's seeded CPU generator."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (tokens,), generator=g, dtype=torch.int64)


def rms(x: torch.Tensor) -> float:
    return x.double().square().mean().sqrt().item()


def cosine_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


def report(model: dsv4_ref.Model, streams, traces, final_hidden, exact_final_hidden) -> None:
    print("activation scale (RMS over all elements):")
    for layer, trace in enumerate(traces):
        print(f"  layer {layer}: input stream {rms(streams[layer]):.4f}  attention out {rms(trace.attn_out):.4f}"
              f"  moe out {rms(trace.moe_out):.4f}")
    print(f"  pre-hc_head stream {rms(streams[-1]):.4f}  final_hidden {rms(final_hidden):.4f}")
    logits = model.logits(final_hidden)
    exact_logits = model.logits(exact_final_hidden)
    cos = cosine_rows(logits, exact_logits)
    agree = (logits.argmax(-1) == exact_logits.argmax(-1)).double().mean().item()
    print(f"default vs exact-math logits: cosine median {cos.median().item():.6f}, min {cos.min().item():.6f}, "
          f"share >= 0.999: {(cos >= 0.999).double().mean().item():.3f}; argmax agreement {agree:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="checkpoint directory (config.json + *.safetensors)")
    ap.add_argument("--out", type=Path, required=True, help="golden safetensors file to write")
    ap.add_argument("--tokens", type=int, default=300, help="sequence length T")
    ap.add_argument("--seed", type=int, default=1, help="seed of the token ids (by convention the make-model seed)")
    ap.add_argument("--preset", default="tiny", help="preset name recorded in the metadata")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    start = time.time()
    model = dsv4_ref.Model(args.model)
    cfg = model.cfg
    ids = seeded_ids(cfg.vocab_size, args.tokens, args.seed)
    T = args.tokens

    default, exact = dsv4_ref.Numerics(exact=False), dsv4_ref.Numerics(exact=True)
    streams, traces, final_hidden = model.forward(ids, default)
    exact_streams, _, exact_final_hidden = model.forward(ids, exact)
    mtp_hidden, _ = model.mtp_forward(streams[-1][: T - 1], ids[1:], default)
    exact_mtp_hidden, _ = model.mtp_forward(exact_streams[-1][: T - 1], ids[1:], exact)

    goldens = {"input_ids": ids}
    for layer in range(cfg.n_layers):
        goldens[f"layers.{layer}.input"] = streams[layer].to(torch.bfloat16)
        goldens[f"layers.{layer}.experts"] = traces[layer].experts.to(torch.int64)
        goldens[f"layers.{layer}.expert_weights"] = traces[layer].expert_weights.to(torch.float32)
        if traces[layer].indexer_topk is not None:
            goldens[f"layers.{layer}.indexer_topk"] = traces[layer].indexer_topk
    goldens["hc_head.input"] = streams[-1].to(torch.bfloat16)
    goldens["final_hidden"] = final_hidden
    goldens["exact.final_hidden"] = exact_final_hidden
    goldens["mtp.final_hidden"] = mtp_hidden
    goldens["exact.mtp.final_hidden"] = exact_mtp_hidden
    goldens = {k: v.contiguous() for k, v in goldens.items()}
    metadata = {"preset": args.preset, "seed": str(args.seed), "tokens": str(T),
                "generator": "scripts/reference/make_goldens.py", "torch": torch.__version__}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(goldens, str(args.out), metadata=metadata)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {len(goldens)} tensors) in {time.time() - start:.1f} s")
    report(model, streams, traces, final_hidden, exact_final_hidden)


if __name__ == "__main__":
    main()
