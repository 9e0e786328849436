#!/usr/bin/env bash
# scripts/ncu_sass_regions.py on a small SASS source page in ncu's CSV form (written here): the
# totals, the regions cut after barriers with their shares and stall reasons, the opcodes and the
# hottest instruction; --min-share and --split-at; a gzipped page reads the same; a file that is not
# the SASS page, or lacks the source counters, is refused with the reason.
set -euo pipefail
script=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Ten instructions: a load phase ending at a barrier (20 samples), an MMA phase ending at its wait
# (60 samples, 50 of them at the wait), a store phase ending at EXIT (20 samples).
cat >"$work/page.csv" <<'CSV'
"Kernel Name","void kernel(Params)",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_barrier","stall_long_sb","stall_wait","stall_long_sb (Not Issued)"
"0x10","LDG.E R4, desc[UR4][R2.64]","5","100","0","5","0","5"
"0x20","@!P0 LDGSTS.E.BYPASS.128 [R9], desc[UR4][R12.64]","5","100","0","5","0","5"
"0x30","BAR.SYNC.DEFER_BLOCKING 0x0","10","100","10","0","0","0"
"0x40","HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20].tnspB, R24","5","100","0","0","5","0"
"0x50","HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20].tnspB, R24, gsb0","5","100","0","0","5","0"
"0x60","WARPGROUP.DEPBAR.LE gsb0, 0x0","50","100","50","0","0","0"
"0x70","FMUL R5, R5, R6","0","400","0","0","0","0"
"0x80","STG.E.64 desc[UR4][R8.64], R24","15","100","0","15","0","15"
"0x90","STG.E.64 desc[UR4][R8.64+0x20], R26","5","100","0","5","0","5"
"0xa0","EXIT","0","100","0","0","0","0"
CSV
python3 "$script" "$work/page.csv" >"$work/out.txt" 2>"$work/err.txt" || fail "run: $(cat "$work/err.txt")"
grep -q "^10 SASS instructions, 1,300 warp instructions executed, 100 stall samples$" "$work/out.txt" ||
  fail "totals: $(cat "$work/out.txt")"
grep -qE "^ +0-2 +20\.0% +20\.0% +300  ends BAR\.SYNC\.DEFER_BLOCKING; cp\.async x1 LDG x1; barrier 50%, long_sb 50%$" \
  "$work/out.txt" || fail "load region: $(cat "$work/out.txt")"
grep -qE "^ +3-5 +60\.0% +80\.0% +300  ends WARPGROUP\.DEPBAR\.LE; MMA x2; barrier 83%, wait 17%$" "$work/out.txt" ||
  fail "MMA region: $(cat "$work/out.txt")"
grep -qE "^ +6-9 +20\.0% +100\.0% +700  ends EXIT; STG x2; long_sb 100%$" "$work/out.txt" ||
  fail "store region: $(cat "$work/out.txt")"
grep -qE "^  FMUL +30\.8% +0\.0%$" "$work/out.txt" || fail "opcodes: $(cat "$work/out.txt")"
hottest=$(grep -A1 "^hottest instructions" "$work/out.txt" | tail -n 1)
echo "$hottest" | grep -qE "^ +5 +50\.0% +100  WARPGROUP\.DEPBAR\.LE gsb0, 0x0  \[barrier 100%\]$" ||
  fail "hottest: $hottest"
# Regions under --min-share are left out.
python3 "$script" "$work/page.csv" --min-share 25 >"$work/out25.txt" || fail "--min-share run"
[[ $(grep -cE "^ +[0-9]+-[0-9]+ " "$work/out25.txt") -eq 1 ]] || fail "--min-share 25: $(cat "$work/out25.txt")"

# --split-at cuts after its matches too: the store region's FMUL becomes a region of its own.
python3 "$script" "$work/page.csv" --split-at '^FMUL' --min-share 0 >"$work/split.txt" || fail "--split-at run"
grep -qE "^ +6-6 +0\.0% +80\.0% +400  ends FMUL; -; -$" "$work/split.txt" || fail "--split-at: $(cat "$work/split.txt")"
grep -qE "^ +7-9 +20\.0% +100\.0% +300  ends EXIT; STG x2; long_sb 100%$" "$work/split.txt" ||
  fail "--split-at: $(cat "$work/split.txt")"

gzip -c "$work/page.csv" >"$work/page.csv.gz"
python3 "$script" "$work/page.csv.gz" >"$work/out_gz.txt" || fail "gzipped page"
cmp -s "$work/out.txt" "$work/out_gz.txt" || fail "the gzipped page reads differently"

echo '"ID","Name"' >"$work/other.csv"
if python3 "$script" "$work/other.csv" >/dev/null 2>"$work/err.txt"; then fail "a page without the header was taken"; fi
grep -q 'no header row starting with "Address"' "$work/err.txt" || fail "no-header reason: $(cat "$work/err.txt")"
printf '"Address","Source"\n"0x10","EXIT"\n' >"$work/no_counters.csv"
if python3 "$script" "$work/no_counters.csv" >/dev/null 2>"$work/err.txt"; then fail "a page without counters was taken"; fi
grep -q 'no column "Instructions Executed" (profile with --section SourceCounters)' "$work/err.txt" ||
  fail "no-counters reason: $(cat "$work/err.txt")"
echo "ncu_sass_regions: ok"
