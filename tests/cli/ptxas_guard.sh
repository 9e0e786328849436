#!/usr/bin/env bash
# scripts/ptxas_guard.sh, the device kernels' compiler launcher: a compile whose ptxas output
# reports serialised WGMMAs fails (with the compiler's messages passed through), one without
# succeeds, and a failing compile keeps its exit status.
set -euo pipefail
guard=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

serialised="ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized"
if bash "$guard" sh -c "echo '$serialised' >&2" 2>"$work/err.txt"; then fail "a serialising compile passed"; fi
grep -q "C7514" "$work/err.txt" || fail "the compiler's message was not passed on: $(cat "$work/err.txt")"
grep -q "ptxas_guard: ptxas serialised WGMMAs" "$work/err.txt" || fail "no reason given: $(cat "$work/err.txt")"
bash "$guard" sh -c "echo 'ptxas info    : Used 168 registers' >&2; echo out" >"$work/out.txt" 2>"$work/err.txt" ||
  fail "a clean compile failed: $(cat "$work/err.txt")"
[ "$(cat "$work/out.txt")" = "out" ] || fail "stdout not passed on: $(cat "$work/out.txt")"
grep -q "Used 168 registers" "$work/err.txt" || fail "stderr not passed on"
set +e
bash "$guard" sh -c "exit 3" 2>/dev/null
status=$?
set -e
[ "$status" -eq 3 ] || fail "a failing compile's status became $status"
echo "ptxas guard: ok"
