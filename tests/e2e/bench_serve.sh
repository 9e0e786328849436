#!/usr/bin/env bash
# `dsv4 bench serve` against `dsv4 serve` (the tiny model on the CPU) on 127.0.0.1: a run at
# concurrency 4 whose saved JSON and printed block must add up, a Poisson-rate chat run, a run on a
# shared prompt prefix that the server's prefix cache serves, and a
# wrong key and a wrong URL, which must be counted as failures and fail the command with a clear
# message; a run against two data-parallel ranks; a concurrency sweep plotted by scripts/plot_bench_serve.py (matplotlib in the .venv
# scripts/setup.sh makes). Usage: bench_serve.sh DSV4 PYTHON
set -euo pipefail
dsv4=$1
python=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
source "$here/serve_lib.sh"
trap 'stop_server_now; rm -rf "$work"' EXIT

start_server "$dsv4" "$work" --max-num-seqs 4

# Concurrency 4, all at once, full-length outputs; the model name comes from /v1/models.
timeout 60 "$dsv4" bench serve --base-url "$url" --api-key sekrit --num-prompts 8 --random-input-len 32 \
  --random-output-len 8 --max-concurrency 4 --ignore-eos --save-result --result-dir "$work/results" \
  --result-filename c4.json >"$work/c4.txt" || fail "bench serve: $(cat "$work/c4.txt")"
python3 - "$work/results/c4.json" "$work/c4.txt" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
assert r["completed"] == 8 and r["failed"] == 0 and r["errors"] == [""] * 8, r["errors"]
assert r["model_id"] == "tiny" and r["max_concurrency"] == 4 and r["request_rate"] == "inf", r
assert r["output_lens"] == [8] * 8 and r["total_output_tokens"] == 64, r["output_lens"]
# The prompt lengths are the server's count; random ids re-encode to about the asked length.
assert all(24 <= n <= 40 for n in r["input_lens"]) and r["total_input_tokens"] == sum(r["input_lens"]), r["input_lens"]
assert len(r["ttfts"]) == 8 and all(0 < t < r["duration"] for t in r["ttfts"]), r["ttfts"]
# One gap per content chunk after the first; a chunk may carry more than one token.
assert all(1 <= len(itl) <= 7 and all(x >= 0 for x in itl) for itl in r["itls"]), r["itls"]
assert all(l >= t for l, t in zip(r["latencies"], r["ttfts"])), r
for key in ("request_throughput", "output_throughput", "total_token_throughput", "duration"):
    assert r[key] > 0, key
assert abs(r["output_throughput"] - 64 / r["duration"]) < 1e-6 * r["output_throughput"]
for metric in ("ttft", "tpot", "itl", "e2el"):
    assert 0 < r[f"mean_{metric}_ms"] and 0 < r[f"median_{metric}_ms"] <= r[f"p99_{metric}_ms"], metric
# TPOT of one request is its time after the first token over the 7 tokens after it.
tpots = sorted((l - t) / 7 for l, t in zip(r["latencies"], r["ttfts"]))
assert abs(r["mean_tpot_ms"] - 1e3 * sum(tpots) / 8) < 1e-6 * r["mean_tpot_ms"]
assert "=" * 12 + " Serving Benchmark Result " + "=" * 12 in out, out
rows = dict(re.findall(r"^(.+?):\s+(\S+)\s*$", out, re.M))
assert rows["Successful requests"] == "8" and rows["Failed requests"] == "0", rows
assert rows["Total generated tokens"] == "64" and rows["Maximum request concurrency"] == "4", rows
assert abs(float(rows["Mean TTFT (ms)"]) - r["mean_ttft_ms"]) < 0.01, rows
for name in ("Benchmark duration (s)", "Request throughput (req/s)", "Output token throughput (tok/s)",
             "Total Token throughput (tok/s)", "Median TPOT (ms)", "P99 ITL (ms)", "Mean E2EL (ms)"):
    assert float(rows[name]) > 0, name
PY

# Poisson arrivals at 20 requests/s through the chat endpoint, the key from the environment.
OPENAI_API_KEY=sekrit timeout 60 "$dsv4" bench serve --base-url "$url" --endpoint /v1/chat/completions --model tiny \
  --num-prompts 4 --random-input-len 16 --random-output-len 4 --request-rate 20 --seed 3 --ignore-eos --save-result \
  --result-dir "$work/results" --result-filename rate.json >"$work/rate.txt" || fail "rate run: $(cat "$work/rate.txt")"
python3 - "$work/results/rate.json" "$work/rate.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["completed"] == 4 and r["failed"] == 0 and r["request_rate"] == 20 and r["endpoint_type"] == "openai-chat", r
assert r["output_lens"] == [4] * 4, r["output_lens"]
# Sent at random gaps after each other, the first at once.
starts = r["start_times"]
assert starts == sorted(starts) and starts[0] < 0.05 and starts[-1] > starts[0], starts
assert "Request rate configured (RPS):           20.00" in open(sys.argv[2]).read()
PY

# vLLM's other flags: the chat backend, the served name apart from --model, gamma arrivals, chosen
# metrics and percentiles, goodput under objectives and a label.
timeout 60 "$dsv4" bench serve --base-url "$url" --api-key sekrit --backend openai-chat --model org/the-model \
  --served-model-name tiny --num-prompts 4 --random-input-len 8 --random-output-len 3 --request-rate 50 --burstiness 0.5 \
  --percentile-metrics ttft,e2el --metric-percentiles 50,90 --goodput ttft:600000 e2el:600000 --label lab --disable-tqdm \
  --ignore-eos --save-result --result-dir "$work/vllm" >"$work/vllm.txt" || fail "vLLM flags: $(cat "$work/vllm.txt")"
python3 - "$work/vllm" "$work/vllm.txt" <<'PY'
import glob, json, os, sys
files = glob.glob(os.path.join(sys.argv[1], "*.json"))
assert len(files) == 1 and os.path.basename(files[0]).startswith("lab-50.0qps-the-model-"), files
r = json.load(open(files[0]))
out = open(sys.argv[2]).read()
assert r["label"] == "lab" and r["model_id"] == "org/the-model" and r["endpoint_type"] == "openai-chat", r
assert r["completed"] == 4 and r["burstiness"] == 0.5, r
assert r["median_ttft_ms"] > 0 and r["p50_ttft_ms"] == r["median_ttft_ms"] and r["p90_e2el_ms"] >= r["p50_e2el_ms"], r
assert not any(k.startswith(("mean_tpot", "mean_itl", "p99_")) for k in r), sorted(r)
assert abs(r["request_goodput"] - r["request_throughput"]) < 1e-9, r  # every request meets 600 s
assert "Burstiness factor: 0.5 (Gamma distribution)" in out and "P90 E2EL (ms):" in out, out
assert "Request goodput (req/s):" in out and "TPOT" not in out, out
PY
if "$dsv4" bench serve --base-url "$url" --backend openai-chat --endpoint /v1/completions --num-prompts 1 \
  >"$work/backend.txt" 2>&1; then fail "openai-chat with a completions endpoint passed"; fi
grep -q "openai-chat posts chat completions, but --endpoint is /v1/completions" "$work/backend.txt" \
  || fail "backend mismatch: $(cat "$work/backend.txt")"
if "$dsv4" bench serve --base-url "$url" --goodput ttft:fast --num-prompts 1 >"$work/goodput.txt" 2>&1; then
  fail "--goodput ttft:fast passed"
fi
grep -q "ttft:fast: the objective must be a number of milliseconds" "$work/goodput.txt" \
  || fail "goodput message: $(cat "$work/goodput.txt")"

# vLLM's ShareGPT dataset: first turns as prompts, second turns' lengths as outputs; conversations
# with an answer under 4 tokens and entries of another shape are left out; fewer than asked cycle.
cat >"$work/sharegpt.json" <<'JSON'
[{"id": "a", "conversations": [{"from": "human", "value": "Tell me a short story about a brave little robot."},
                               {"from": "gpt", "value": "Once upon a time there was a tiny robot named Bolt."}]},
 {"id": "b", "conversations": [{"from": "human", "value": "Say yes or no, please, nothing more."}, {"from": "gpt", "value": "Yes"}]},
 {"id": "c"},
 {"id": "d", "conversations": [{"from": "human", "value": "What is the capital of France, and why?"},
                               {"from": "gpt", "value": "Paris is the capital of France."}]}]
JSON
timeout 60 "$dsv4" bench serve --base-url "$url" --api-key sekrit --model tiny --dataset-name sharegpt \
  --dataset-path "$work/sharegpt.json" --num-prompts 3 --ignore-eos --save-result --result-dir "$work/sharegpt" \
  --result-filename sg.json >"$work/sharegpt.txt" || fail "sharegpt run: $(cat "$work/sharegpt.txt")"
python3 - "$work/sharegpt/sg.json" "$work/sharegpt.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["completed"] == 3 and r["failed"] == 0, r
lens = r["output_lens"]
assert len(set(lens)) == 2 and all(l >= 4 for l in lens) and lens[2] == lens[0], lens  # a, d, then a again
assert "ShareGPT prompts from" in open(sys.argv[2]).read()
PY
if "$dsv4" bench serve --base-url "$url" --dataset-name sharegpt --num-prompts 1 >"$work/nopath.txt" 2>&1; then
  fail "sharegpt without --dataset-path passed"
fi
grep -q "needs --dataset-path" "$work/nopath.txt" || fail "sharegpt without a path: $(cat "$work/nopath.txt")"

# A sweep over concurrency 1 and 2: one block and one JSON each, plotted as a PNG.
timeout 60 "$dsv4" bench serve --base-url "$url" --api-key sekrit --model tiny --num-prompts 2 --random-input-len 8 \
  --random-output-len 3 --max-concurrency 1,2 --ignore-eos --save-result --result-dir "$work/sweep" \
  --result-filename sweep.json >"$work/sweep.txt" || fail "sweep: $(cat "$work/sweep.txt")"
[ "$(grep -c "Serving Benchmark Result" "$work/sweep.txt")" = 2 ] || fail "sweep blocks: $(cat "$work/sweep.txt")"
grep -q "^Maximum request concurrency: *2" "$work/sweep.txt" || fail "sweep: no concurrency 2 block"
"$python" "$here/../../scripts/plot_bench_serve.py" "$work/sweep.png" "$work/sweep/sweep-concurrency1.json" \
  "$work/sweep/sweep-concurrency2.json" || fail "the plot"
[ "$(head -c 8 "$work/sweep.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "sweep.png is not a PNG"

# A shared random prefix (--random-prefix-len): one at a time, the second and third requests resume
# on the first one's state at 128 tokens, which the server's prefix-cache counter shows.
timeout 60 "$dsv4" bench serve --base-url "$url" --api-key sekrit --model tiny --num-prompts 3 --random-prefix-len 150 \
  --random-input-len 8 --random-output-len 2 --max-concurrency 1 --ignore-eos >"$work/prefix.txt" \
  || fail "prefix run: $(cat "$work/prefix.txt")"
grep -q "of about 158 tokens (150 of them shared" "$work/prefix.txt" || fail "prefix run: $(head -n 1 "$work/prefix.txt")"
python3 - "$url" <<'PY' || fail "prefix cache hits after the shared-prefix run"
import re, sys, urllib.request
request = urllib.request.Request(sys.argv[1] + "/metrics", headers={"Authorization": "Bearer sekrit"})
text = urllib.request.urlopen(request, timeout=30).read().decode()
hits = float(re.search(r"^dsv4:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M).group(1))
assert hits >= 256, hits
PY

# A wrong key: every request is a counted 401 and the command fails, saying so.
if timeout 60 "$dsv4" bench serve --base-url "$url" --api-key wrong --model tiny --num-prompts 3 --random-input-len 8 \
  --random-output-len 2 --save-result --result-dir "$work/results" --result-filename key.json \
  >"$work/key.txt" 2>"$work/key.err"; then fail "a wrong key passed"; fi
grep -q "^Failed requests: *3" "$work/key.txt" || fail "wrong key: $(cat "$work/key.txt")"
grep -q "3 of 3 requests failed; the first: HTTP 401" "$work/key.err" || fail "wrong key message: $(cat "$work/key.err")"
python3 - "$work/results/key.json" <<'PY' || fail "key.json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["completed"] == 0 and r["failed"] == 3 and all("401" in e for e in r["errors"]), r
PY

# A port nothing listens on (the server's, once stopped): counted connection failures.
stop_server
if timeout 60 "$dsv4" bench serve --base-url "$url" --model tiny --num-prompts 2 --random-input-len 8 \
  --random-output-len 2 >"$work/url.txt" 2>"$work/url.err"; then fail "a dead URL passed"; fi
grep -q "^Failed requests: *2" "$work/url.txt" || fail "dead URL: $(cat "$work/url.txt")"
grep -q "2 of 2 requests failed; the first: $url/v1/completions: Connection error" "$work/url.err" \
  || fail "dead URL message: $(cat "$work/url.err")"

# Two data-parallel ranks, each holding half of the experts (--data-parallel-size 2
# --enable-expert-parallel): every request served, the start-up line per rank, the metrics summed.
start_server "$dsv4" "$work" --max-num-seqs 4 --data-parallel-size 2 --enable-expert-parallel
grep -q "cache on each of 2 data-parallel ranks" "$work/serve.log" || fail "no per-rank cache line"
grep -q "serve: ready: .*(each of 2 data-parallel ranks)" "$work/serve.log" || fail "no per-rank ready line"
timeout 60 "$dsv4" bench serve --base-url "$url" --api-key sekrit --num-prompts 8 --random-input-len 32 \
  --random-output-len 6 --max-concurrency 8 --ignore-eos --save-result --result-dir "$work/results" \
  --result-filename dp2.json >"$work/dp2.txt" || fail "bench serve on two ranks: $(cat "$work/dp2.txt")"
python3 - "$work/results/dp2.json" "$url" <<'PY' || fail "two ranks"
import json, re, sys, urllib.request
r = json.load(open(sys.argv[1]))
assert r["completed"] == 8 and r["failed"] == 0 and r["output_lens"] == [6] * 8, r
request = urllib.request.Request(sys.argv[2] + "/metrics", headers={"Authorization": "Bearer sekrit"})
text = urllib.request.urlopen(request, timeout=30).read().decode()
tokens = float(re.search(r"^dsv4:generation_tokens_total\{[^}]*\} (\S+)$", text, re.M).group(1))
assert tokens == 48, tokens
PY
stop_server
echo "ok"
