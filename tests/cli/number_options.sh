#!/usr/bin/env bash
# The commands' numeric options refuse a bad value saying what is wrong, before anything runs:
# "must be above 0", "must be 0 or more", "must be from A to B", or "is not a number", each
# naming the option and the value (CLI11's own checks wrote "Value 0 not in range 0.000000 to"
# and the largest double in full, and "not in range" for a value that is not a number).
set -euo pipefail
dsv4=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# refused EXPECTED ARGS...: the command fails, its first line of stderr is EXPECTED.
refused() {
  local expected=$1
  shift
  if "$dsv4" "$@" >"$work/out.txt" 2>"$work/err.txt"; then fail "$* was accepted"; fi
  [ "$(head -n 1 "$work/err.txt")" = "$expected" ] || fail "$*: got '$(head -n 1 "$work/err.txt")', want '$expected'"
  if grep -q "not in range\|179769" "$work/err.txt"; then fail "$*: CLI11's range message: $(cat "$work/err.txt")"; fi
}
refused "--batch: must be above 0, got 0" bench step --model tiny --batch 0
refused "--batch: 'x' is not a number" bench step --model tiny --batch 1,x
refused "--threads: must be 0 or more, got -1" bench layers --model tiny --threads -1
refused "--prefill-lengths: must be above 0, got 0" bench step --model tiny --prefill-lengths 0
refused "--num-prompts: must be above 0, got 0" bench throughput --model tiny --num-prompts 0
refused "--gpu-memory-utilization: must be from 0 to 1, got 1.5" bench throughput --model tiny --gpu-memory-utilization 1.5
refused "--request-rate: must be above 0, got -2" bench serve --request-rate -2
# A value in range still runs (a number CLI11 then converts).
"$dsv4" bench step --model tiny --context 16 --batch 1 --iters 1 --repeats 1 --threads 1 >"$work/out.txt" 2>"$work/err.txt" ||
  fail "bench step with valid numbers: $(cat "$work/err.txt")"
grep -q "^decode b=1 " "$work/out.txt" || fail "bench step rows: $(cat "$work/out.txt")"
echo "number options: ok"
