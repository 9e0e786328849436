# Session 47's fifth device call: racecheck of the CTA-a-token sparse attention kernel (its last
# split's rows in the queries' and entry tiles' shared memory; call 3's racecheck timed out), then
# where a CSA prefill launch spends its time after the last split moved to shared memory and the
# partials' discard (main 9e3ef25): ncu's warp states and stall samples by SASS region. Carry
# [".dev/gpu.tar.xz"]; timeouts sum to 380 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== racecheck CsaDeep (every split schedule, rows and packed)" >> $O
timeout 230 compute-sanitizer --tool racecheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep' 2>&1 | grep -v "Host Frame" \
  | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
timeout 110 ncu --clock-control none -k regex:sparse_attn_wgmma --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis -f -o /tmp/attn \
  ./bench_sparse_attention 1 "csa prefill" > /tmp/ncu.txt 2>&1; echo "rc=$?" >> $O
ncu -i /tmp/attn.ncu-rep --page details 2>&1 | grep -E "Duration|Throughput|Issued|Eligible|Hit Rate|Warp Cycles" | head -16 >> $O
ncu -i /tmp/attn.ncu-rep --page source --csv --print-source sass > /tmp/attn_src.csv 2>/dev/null && \
  timeout 30 python3 ncu_sass_regions.py /tmp/attn_src.csv --top 14 >> $O 2>&1
echo "== done" >> $O
