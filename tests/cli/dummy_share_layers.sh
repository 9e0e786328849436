#!/usr/bin/env bash
# --dummy-share-layers end to end on the CPU: the serving benchmark runs on the tiny preset with
# layers of one kind sharing dummy weights (what V4-Flash needs to fit one H200), and the flag is
# refused, naming itself, where no dummy weights are made.
set -euo pipefail
dsv4=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$dsv4" bench throughput --model tiny --load-format dummy --dummy-share-layers --num-prompts 3 --input-len 16 \
  --output-len 4 --threads 2 --json >"$work/r.json" 2>"$work/err.txt" || fail "the run failed: $(cat "$work/err.txt")"
python3 - "$work/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["completed"] == 3 and r["output_throughput"] > 0, r
PY
"$dsv4" make-model --preset tiny --seed 1 --out "$work/tiny" >/dev/null
if "$dsv4" bench throughput --model "$work/tiny" --dummy-share-layers --num-prompts 1 2>"$work/err.txt"; then
  fail "--dummy-share-layers accepted with a checkpoint"
fi
grep -q -- "--dummy-share-layers needs --load-format dummy" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
echo "ok"
