#!/usr/bin/env bash
# scripts/ab_step.sh end to end on the CPU backend with the tiny preset: the same binary as base and
# new, two rounds, a table row per bench step row with each round's time and the change, each
# run's JSON kept with --out; two new binaries named new1 and new2, a change each; bad arguments
# are refused with the reason.
set -euo pipefail
dsv4=$1
script=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

bash "$script" --rounds 2 --out "$work/runs" "$dsv4" "$dsv4" -- --model tiny --context 40 --batch 1,2 --iters 1 \
  --repeats 1 --threads 2 >"$work/out.txt" 2>"$work/err.txt" || fail "A/B run: $(cat "$work/err.txt")"
for row in "prefill 40" "decode b=1" "decode b=2"; do
  line=$(grep "^$row " "$work/out.txt") || fail "no row '$row': $(cat "$work/out.txt")"
  # Two rounds a side, then the change in percent.
  [[ $(echo "$line" | grep -oE '[0-9]+\.[0-9]{3}' | wc -l) -eq 4 ]] || fail "row '$row': $line"
  echo "$line" | grep -qE '[+-][0-9]+\.[0-9]{2}%$' || fail "row '$row' has no change: $line"
done
for f in base-1 base-2 new-1 new-2; do
  [[ -s "$work/runs/$f.json" && -s "$work/runs/$f.txt" ]] || fail "run $f not kept in --out"
done
grep -q "round 2 of 2, new" "$work/err.txt" || fail "progress: $(cat "$work/err.txt")"

bash "$script" --rounds 1 --out "$work/three" "$dsv4" "$dsv4" "$dsv4" -- --model tiny --context 40 --batch 1 \
  --iters 1 --repeats 1 --threads 2 >"$work/out.txt" 2>"$work/err.txt" || fail "three binaries: $(cat "$work/err.txt")"
grep -q "new1 ms (each round).*best new1/base.*new2 ms (each round).*best new2/base" "$work/out.txt" ||
  fail "three binaries' header: $(cat "$work/out.txt")"
line=$(grep "^decode b=1 " "$work/out.txt") || fail "no decode row: $(cat "$work/out.txt")"
# One round a binary, and a change for each new one.
[[ $(echo "$line" | grep -oE '[0-9]+\.[0-9]{3}' | wc -l) -eq 3 ]] || fail "three binaries' row: $line"
[[ $(echo "$line" | grep -oE '[+-][0-9]+\.[0-9]{2}%' | wc -l) -eq 2 ]] || fail "three binaries' changes: $line"
for f in base-1 new1-1 new2-1; do
  [[ -s "$work/three/$f.json" ]] || fail "run $f not kept in --out"
done

expect_refusal() {  # expect_refusal WHAT PATTERN ARGS...
  local what=$1 pattern=$2
  shift 2
  if bash "$script" "$@" >/dev/null 2>"$work/err.txt"; then fail "$what accepted"; fi
  grep -q -- "$pattern" "$work/err.txt" || fail "$what: $(cat "$work/err.txt")"
}
expect_refusal "one binary" "needs BASE_DSV4 and NEW_DSV4" "$dsv4"
expect_refusal "a missing binary" "nonesuch" "$dsv4" "$work/nonesuch"
expect_refusal "zero rounds" "--rounds must be a positive integer" --rounds 0 "$dsv4" "$dsv4"
expect_refusal "--json" "--json is set by the script" "$dsv4" "$dsv4" -- --model tiny --json "$work/x.json"
expect_refusal "a failing run" "base run 1 failed" "$dsv4" "$dsv4" -- --model nonesuch
bash "$script" --help | grep -q "Usage: scripts/ab_step.sh" || fail "--help"
echo "ok"
