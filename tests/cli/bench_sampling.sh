#!/usr/bin/env bash
# `dsv4 bench sampling` end to end: a row per request setting with positive per-row, per-step and
# backend times in the JSON report, the backend's tokens the host's, the requested geometry
# echoed; bad arguments and a report file that cannot be written are refused, naming the problem,
# before the benchmark runs.
set -euo pipefail
dsv4=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$dsv4" bench sampling --vocab 5000 --batch 6 --draws 5 --threads 2 --json "$work/s.json" >"$work/out.txt"
python3 - "$work/s.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["vocab"] == 5000 and r["batch"] == 6 and r["threads"] == 2, r
rows = r["rows"]
assert len(rows) == 7 and rows[0]["settings"].startswith("temperature 1"), rows
assert any("top_p" in x["settings"] for x in rows) and any("top_k" in x["settings"] for x in rows), rows
assert any("logprobs" in x["settings"] for x in rows), rows
for x in rows:
    assert x["ms_per_row"] > 0 and x["ms_per_step"] > 0 and x["backend_ms_per_step"] > 0, x
    assert x["backend_rows_not_the_hosts"] == 0, x
assert r["device"] == "cpu", r
PY
grep -q "ms / row" "$work/out.txt" || fail "no table header in: $(cat "$work/out.txt")"
if "$dsv4" bench sampling --vocab 0 >"$work/bad.txt" 2>&1; then fail "--vocab 0 was accepted"; fi
grep -q -- "--vocab" "$work/bad.txt" || fail "the refusal does not name --vocab: $(cat "$work/bad.txt")"
if "$dsv4" bench sampling --vocab 500 --batch 2 --draws 1 --json "$work/no/such/dir/s.json" >"$work/io.txt" 2>&1; then
  fail "an unwritable --json file was accepted"
fi
grep -q "no/such/dir/s.json: cannot write the report" "$work/io.txt" || fail "the refusal does not name the file: $(cat "$work/io.txt")"
if grep -q "ms / row" "$work/io.txt"; then fail "the benchmark ran before the unwritable file was refused"; fi
echo "bench sampling: ok"
