#!/usr/bin/env bash
# `dsv4 bench step` end to end on the CPU backend with the tiny preset's geometry: a prefill row
# for the context and for each --prefill-lengths entry, and a decode row per batch size, each
# with a positive time, rate and floor; layers of one kind share weights (the model is made at
# all); bad arguments are refused.
set -euo pipefail
dsv4=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$dsv4" bench step --model tiny --context 100 --prefill-chunk 40 --prefill-lengths 30,130 --batch 1,3 --iters 2 \
  --repeats 2 --threads 2 --json "$work/s.json" >"$work/out.txt"
python3 - "$work/s.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert r["backend"] == "cpu" and r["context"] == 100 and r["layers"] == 4 and r["cuda_graphs"] is False, r
assert [x["run"] for x in rows] == ["prefill 100", "prefill 30", "prefill 130", "decode b=1", "decode b=3"], rows
for x in rows:
    assert x["ms"] > 0 and x["floor_ms"] > 0 and x["tokens_per_s"] > 0, x
    assert x["ms_min"] <= x["ms"] <= x["ms_max"], x
for x in rows[:3]:
    assert x["chunk"] == 40 and x["linear_tflop"] > 0 and x["tflop_per_s"] > 0, x
# More tokens, more work: linear FLOPs grow with the length, attention's faster.
assert rows[1]["linear_tflop"] < rows[0]["linear_tflop"] < rows[2]["linear_tflop"], rows
assert rows[1]["attention_tflop"] < rows[0]["attention_tflop"] < rows[2]["attention_tflop"], rows
# Three sequences read more cache entries and touch more experts than one.
assert rows[4]["gb_per_step"] > rows[3]["gb_per_step"], rows
assert all(0 < x["enqueue_ms"] for x in rows[3:]), rows
PY
grep -q "^decode b=3" "$work/out.txt" || fail "table: $(cat "$work/out.txt")"
if "$dsv4" bench step --model tiny --prefill-chunk 0 2>"$work/err.txt"; then fail "chunk 0 accepted"; fi
if "$dsv4" bench step --model tiny --prefill-lengths 64,0 2>"$work/err.txt"; then fail "prefill length 0 accepted"; fi
grep -q -- "--prefill-lengths" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
if "$dsv4" bench step --model nonesuch 2>"$work/err.txt"; then fail "unknown model accepted"; fi
grep -q "nonesuch" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
echo "ok"
