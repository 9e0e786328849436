#!/usr/bin/env bash
# Prefix caching end to end on the CPU: `bench throughput` with a shared prompt prefix counts the
# hits it should (the first request leaves a state snapshot at 640 tokens, the last multiple of 128
# before its prompt's end, so the two after it skip all 640 shared tokens), none with
# --no-enable-prefix-caching, and a
# block size that does not fit the compression ratios is refused with the numbers, as is a
# snapshot interval without prefix caching; the cache is
# sized from --kv-cache-memory-bytes, or for the longest requests (the CPU has no GPU memory to
# size it from), and the start-up line says which.
set -euo pipefail
dsv4=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {
  "$dsv4" bench throughput --model tiny --load-format dummy --num-prompts 3 --prefix-len 640 --input-len 16 \
    --output-len 2 --max-num-seqs 1 --max-model-len 1024 --threads 2 --json "$@" >"$work/r.json" 2>"$work/err.txt" ||
    fail "bench throughput $*: $(cat "$work/err.txt")"
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["completed"], r["prefix_cache_queries"], r["prefix_cache_hits"])' "$work/r.json"
}
[ "$(run)" = "3 1968 1280" ] || fail "with prefix caching (the CPU default): $(run)"
# Without --kv-cache-memory-bytes the CPU backend sizes the cache for the longest requests, and
# says that --gpu-memory-utilization (default 0.9) does not apply.
grep -q "cache: .* for --max-num-seqs requests of --max-model-len (--gpu-memory-utilization does not apply without a GPU): 16 blocks of 64 tokens: 1024 tokens, 1.00 sequences of max_model_len 1024 at once" \
  "$work/err.txt" || fail "start-up line without a size: $(cat "$work/err.txt")"
[ "$(run --no-enable-prefix-caching)" = "3 0 0" ] || fail "without: $(run --no-enable-prefix-caching)"
# --kv-cache-memory-bytes sizes the blocks and the start-up line says what fits: with bf16 rows 1
# sequence's 1,343,488 bytes of fixed state and the rest in blocks of 41,984 bytes; with the CPU's
# default fp8 entries (584 B an attention entry for 1,024, 68 B an indexer key for 256) 1,061,888
# and 21,448.
sized_run() {
  "$dsv4" bench throughput --model tiny --load-format dummy --num-prompts 1 --input-len 8 --output-len 2 --max-num-seqs 1 \
    --kv-cache-memory-bytes 100000000 --threads 2 "$@" >/dev/null 2>"$work/err.txt" || fail "sized run $*: $(cat "$work/err.txt")"
}
sized_run --kv-cache-dtype bf16
grep -q "cache: 95.3 MiB of bf16 entries from --kv-cache-memory-bytes: 2349 blocks of 64 tokens: 150336 tokens, 36.70 sequences of max_model_len 4096 at once" \
  "$work/err.txt" || fail "start-up line: $(cat "$work/err.txt")"
sized_run
grep -q "cache: 95.3 MiB of fp8 entries from --kv-cache-memory-bytes: 4612 blocks of 64 tokens: 295168 tokens, 72.06 sequences of max_model_len 4096 at once" \
  "$work/err.txt" || fail "start-up line (fp8): $(cat "$work/err.txt")"
if "$dsv4" bench throughput --model tiny --load-format dummy --num-prompts 1 --block-size 48 --threads 2 2>"$work/err.txt"; then
  fail "block size 48 accepted with compression ratio 128"
fi
grep -q "block_size (48) to divide or be a multiple of every compression ratio, and 128 is neither" "$work/err.txt" ||
  fail "error message: $(cat "$work/err.txt")"
# A snapshot interval without prefix caching is refused with both flags named, not ignored.
if "$dsv4" bench throughput --model tiny --load-format dummy --num-prompts 1 --threads 2 --no-enable-prefix-caching \
  --prefix-snapshot-interval 256 2>"$work/err.txt"; then
  fail "--prefix-snapshot-interval accepted without prefix caching"
fi
grep -q "prefix_snapshot_interval = 256 (--prefix-snapshot-interval) .* prefix caching is off (--no-enable-prefix-caching)" \
  "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
echo "ok"
