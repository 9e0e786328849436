#!/usr/bin/env bash
# A/B timing of dsv4 builds in one session on one machine: `dsv4 bench step` with each binary in
# turn, ROUNDS times, alternating (base, new, base, new, ...) so that drift of clocks or
# temperature falls on all; then every row's times per binary (each run's median) and the change
# of each new binary's best against the base's. A change of a few tenths of a percent shows only
# this way (docs/PERF.md, session 24). On the GPU machine: carry the base binary beside the
# bundle (xz -c build/tools/dsv4 > .dev/dsv4_base.xz before rebuilding).
# Usage: scripts/ab_step.sh [--rounds N] [--out DIR] BASE_DSV4 NEW_DSV4 [NEW_DSV4...] [-- BENCH_STEP_OPTIONS...]
# Several new binaries (variants of one change) are named new1, new2, ... in the table and DIR,
# one is "new". Each run's table and JSON stay in DIR (default: a temporary folder, removed at the end).
set -euo pipefail
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
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
bins=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  bins+=("$1")
  shift
done
[[ "${1:-}" == "--" ]] && shift
[[ ${#bins[@]} -ge 2 ]] || { usage >&2; fail "needs BASE_DSV4 and NEW_DSV4"; }
for bin in "${bins[@]}"; do
  [[ -x "$bin" ]] || fail "'$bin' is not an executable file"
done
for arg in "$@"; do
  [[ "$arg" != --json* ]] || fail "--json is set by the script (each run's JSON is in --out)"
done
# The binaries' names in the table and in DIR: base, then new or new1, new2, ...
sides=(base)
if [[ ${#bins[@]} -eq 2 ]]; then
  sides+=(new)
else
  for i in $(seq 1 $((${#bins[@]} - 1))); do sides+=("new$i"); done
fi
if [[ -n "$out" ]]; then
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

for round in $(seq 1 "$rounds"); do
  for i in "${!bins[@]}"; do
    side=${sides[$i]}
    bin=${bins[$i]}
    echo "ab_step: round $round of $rounds, $side ($bin)" >&2
    "$bin" bench step "$@" --json "$out/$side-$round.json" >"$out/$side-$round.txt" 2>&1 ||
      fail "$side run $round failed: $(tail -3 "$out/$side-$round.txt")"
  done
done

python3 - "$out" "$rounds" "${sides[@]}" <<'PY'
import json, sys
out, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {side: [json.load(open(f"{out}/{side}-{r}.json"))["rows"] for r in range(1, rounds + 1)] for side in sides}
names = [row["run"] for row in runs["base"][0]]
for side in sides:
    for rows in runs[side]:
        if [row["run"] for row in rows] != names:
            sys.exit(f"ab_step: the runs have different rows: {names} and {[row['run'] for row in rows]}")
header = f"{'run':<18} {'base ms (each round)':<34}"
for side in sides[1:]:
    header += f" {side + ' ms (each round)':<34} {'best ' + side + '/base':>13}"
print(header)
for i, name in enumerate(names):
    times = {side: [rows[i]["ms"] for rows in runs[side]] for side in sides}
    line = f"{name:<18} {' '.join(f'{t:.3f}' for t in times['base']):<34}"
    for side in sides[1:]:
        ratio = min(times[side]) / min(times["base"])
        line += f" {' '.join(f'{t:.3f}' for t in times[side]):<34} {100 * (ratio - 1):+12.2f}%"
    print(line)
PY
