#!/usr/bin/env bash
# A/B timing of two dsv4 builds in one session on one machine: `dsv4 bench step` with each binary
# in turn, ROUNDS times, alternating (base, new, base, new, ...) so that drift of clocks or
# temperature falls on both; then every row's times per binary (each run's median) and the change
# of the new binary's best against the base's. A change of a few tenths of a percent shows only
# this way (docs/PERF.md, session 24). On the GPU machine: carry the base binary beside the
# bundle (xz -c build/tools/dsv4 > .dev/dsv4_base.xz before rebuilding).
# Usage: scripts/ab_step.sh [--rounds N] [--out DIR] BASE_DSV4 NEW_DSV4 [-- BENCH_STEP_OPTIONS...]
# Each run's table and JSON stay in DIR (default: a temporary folder, removed at the end).
set -euo pipefail
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
fail() { echo "ab_step: $*" >&2; exit 2; }

rounds=3
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) [[ $# -ge 2 ]] || fail "--rounds needs a value"; rounds=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || fail "--out needs a value"; out=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) break ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || fail "--rounds must be a positive integer, got '$rounds'"
[[ $# -ge 2 ]] || { usage >&2; fail "needs BASE_DSV4 and NEW_DSV4"; }
base=$1
new=$2
shift 2
[[ "${1:-}" == "--" ]] && shift
for bin in "$base" "$new"; do
  [[ -x "$bin" ]] || fail "'$bin' is not an executable file"
done
for arg in "$@"; do
  [[ "$arg" != --json* ]] || fail "--json is set by the script (each run's JSON is in --out)"
done
if [[ -n "$out" ]]; then
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

for round in $(seq 1 "$rounds"); do
  for side in base new; do
    bin=$base
    [[ $side == new ]] && bin=$new
    echo "ab_step: round $round of $rounds, $side ($bin)" >&2
    "$bin" bench step "$@" --json "$out/$side-$round.json" >"$out/$side-$round.txt" 2>&1 ||
      fail "$side run $round failed: $(tail -3 "$out/$side-$round.txt")"
  done
done

python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {side: [json.load(open(f"{out}/{side}-{r}.json"))["rows"] for r in range(1, rounds + 1)] for side in ("base", "new")}
names = [row["run"] for row in runs["base"][0]]
for side in runs:
    for rows in runs[side]:
        if [row["run"] for row in rows] != names:
            sys.exit(f"ab_step: the runs have different rows: {names} and {[row['run'] for row in rows]}")
print(f"{'run':<18} {'base ms (each round)':<34} {'new ms (each round)':<34} {'best new/base':>13}")
for i, name in enumerate(names):
    times = {side: [rows[i]["ms"] for rows in runs[side]] for side in runs}
    ratio = min(times["new"]) / min(times["base"])
    cells = {side: " ".join(f"{t:.3f}" for t in times[side]) for side in times}
    print(f"{name:<18} {cells['base']:<34} {cells['new']:<34} {100 * (ratio - 1):+12.2f}%")
PY
