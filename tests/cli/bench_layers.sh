#!/usr/bin/env bash
# `dsv4 bench layers` end to end on the CPU backend with the tiny preset's geometry: one row per
# layer kind for the prefill and per layer kind and batch size for decode, each with a positive
# time and floor; bad arguments are refused.
set -euo pipefail
dsv4=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$dsv4" bench layers --model tiny --context 200 --batch 1,3 --iters 2 --repeats 2 --threads 2 --json "$work/b.json" \
  >"$work/out.txt"
python3 - "$work/b.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert r["backend"] == "cpu" and r["context"] == 200, r
runs = [(x["layer"], x["run"]) for x in rows]
want = [(k, run) for run in ("prefill 200", "decode b=1", "decode b=3") for k in ("swa", "csa", "hca")]
assert sorted(runs) == sorted(want), runs
for x in rows:
    assert x["ms"] > 0 and x["floor_ms"] > 0, x
    assert x["repeats"] == 2 and x["ms_min"] <= x["ms"] <= x["ms_max"], x
# More sequences move more cache bytes and touch more experts.
by = {(x["layer"], x["run"]): x for x in rows}
for k in ("swa", "csa", "hca"):
    assert by[(k, "decode b=3")]["weight_mb"] > by[(k, "decode b=1")]["weight_mb"], k
PY
grep -q "^csa    decode b=3" "$work/out.txt" || fail "table: $(cat "$work/out.txt")"
# --profile lists the ops under each row.
"$dsv4" bench layers --model tiny --context 64 --batch 2 --iters 1 --threads 2 --profile >"$work/prof.txt"
grep -q "moe_experts" "$work/prof.txt" || fail "--profile: $(cat "$work/prof.txt")"
grep -q "linear attn.wq_b" "$work/prof.txt" || fail "--profile: $(cat "$work/prof.txt")"
if "$dsv4" bench layers --model tiny --batch 0 2>"$work/err.txt"; then fail "batch 0 accepted"; fi
if "$dsv4" bench layers --model nonesuch 2>"$work/err.txt"; then fail "unknown model accepted"; fi
grep -q "nonesuch" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
echo "ok"
