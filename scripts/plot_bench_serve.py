"""Test-only tooling: plots a `dsv4 bench serve --max-concurrency A,B,... --save-result` sweep,
output token throughput and mean TPOT against the concurrency, into one PNG (matplotlib from the
.venv scripts/setup.sh makes). Usage: plot_bench_serve.py OUT.png RESULT.json...
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out, files = sys.argv[1], sys.argv[2:]
if not files:
    raise SystemExit("usage: plot_bench_serve.py OUT.png RESULT.json...")
runs = []
for name in files:
    r = json.load(open(name))
    if r.get("max_concurrency") is None:
        raise SystemExit(f"{name}: no max_concurrency (run with --max-concurrency)")
    runs.append(r)
runs.sort(key=lambda r: r["max_concurrency"])
concurrency = [r["max_concurrency"] for r in runs]

fig, throughput_axis = plt.subplots(figsize=(7, 4.5))
throughput_axis.plot(concurrency, [r["output_throughput"] for r in runs], "o-", color="tab:blue")
throughput_axis.set_xlabel("max concurrency")
throughput_axis.set_ylabel("output token throughput (tok/s)", color="tab:blue")
throughput_axis.set_xscale("log", base=2)
throughput_axis.set_xticks(concurrency, [str(c) for c in concurrency])
throughput_axis.minorticks_off()
tpot_axis = throughput_axis.twinx()
tpot_axis.plot(concurrency, [r["mean_tpot_ms"] for r in runs], "s--", color="tab:red")
tpot_axis.set_ylabel("mean TPOT (ms)", color="tab:red")
prompts = sorted({r["num_prompts"] for r in runs})
per_run = f"{prompts[0]} prompts per run" if len(prompts) == 1 else "prompts per run: " + ", ".join(
    str(r["num_prompts"]) for r in runs)
fig.suptitle(f"bench serve: {runs[0]['model_id']}, {per_run}")
fig.tight_layout()
fig.savefig(out, dpi=100)
