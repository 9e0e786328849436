# Session 59 call 2: sparse attention's warp-specialised prefill kernel (sparse_attn_wgmma_ws):
# its bits against mma.sync, the sanitizers on it, its launches against main's, the step A/B.
# Output: session59_whole_tiles_h100.txt (+ session59_ncu_sparse_attn_wgmma_ws_h100.txt). Before:
# main (46a091e) built in a worktree as dsv4_base / bench_sparse_attention_base; the kernel taking
# every CTA-a-token launch over rows, built twice (a constant kScoreTurns, false and true: the
# consumer warpgroups taking turns at the scores' MMAs; not kept), the second's binaries as
# dsv4_turns, bench_sa_turns, test_ops_turns; `scripts/gpu_bundle.sh build --with NAME=BINARY ...`.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== test_ops_cuda SparseAttn" >> $O
for b in test_ops_cuda test_ops_turns; do
  timeout 300 ./$b --gtest_filter='*SparseAttn*' > /tmp/t.log 2>&1; echo "$b rc=$?" >> $O
  grep -E "FAILED|PASSED|Failure|differ|first at" /tmp/t.log | head -12 >> $O
done
F='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaFirst:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/SwaPartialHeads'
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer $tool" >> $O
  bins="test_ops_turns"; [ $tool = memcheck ] && bins="test_ops_cuda test_ops_turns"
  for b in $bins; do
    timeout 150 compute-sanitizer --tool $tool ./$b --gtest_filter="$F" > /tmp/cs_$tool.log 2>&1; echo "$b rc=$?" >> $O
    grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$tool.log | head -4 >> $O
  done
done
echo "== bench_sparse_attention prefill: base, new, base, new" >> $O
for b in bench_sparse_attention_base bench_sparse_attention bench_sa_turns bench_sparse_attention_base bench_sparse_attention bench_sa_turns; do
  echo "-- $b" >> $O; timeout 120 ./$b 10 prefill 2>&1 | grep prefill >> $O
done
echo "== ab_step prefill 8192 + decode b=1" >> $O
timeout 420 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 ./dsv4_turns -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== ncu csa prefill (new)" >> $O
timeout 200 ncu -k regex:sparse_attn_wgmma --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section SourceCounters -o /tmp/sa ./bench_sa_turns 1 "csa prefill" > /tmp/ncu.log 2>&1
tail -2 /tmp/ncu.log >> $O
ncu -i /tmp/sa.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu -i /tmp/sa.ncu-rep --page source --csv --print-source sass > /tmp/sa.csv 2>/dev/null
python3 ncu_sass_regions.py /tmp/sa.csv --top 30 > $OUT/ncu_regions.txt 2>&1
echo "== done" >> $O
