# Session 47's last device call: every GPU test binary on main's final build (no sanitizers or
# benchmarks: GPU_SANITIZE=0 GPU_BENCH=0; the changed kernels' sanitizer runs are in the calls
# before), then where a CSA prefill launch of the CTA-a-token sparse attention kernel spends its
# time now (ncu's stall samples by SASS region), for the next session. Carry [".dev/gpu.tar.xz"];
# timeouts sum to 420 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
echo "== GPU tests" > $O
GPU_SANITIZE=0 GPU_BENCH=0 OUT=$OUT/suite timeout 300 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|Failure|PASSED|measure\].*logits" /tmp/suite.txt | head -60 >> $O
echo "== ncu: one CSA prefill launch" >> $O
timeout 90 ncu --clock-control none -k regex:sparse_attn_wgmma --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section SourceCounters -f -o /tmp/attn ./bench_sparse_attention 1 "csa prefill" > /tmp/ncu.txt 2>&1
echo "rc=$?" >> $O
ncu -i /tmp/attn.ncu-rep --page details 2>&1 | grep -E "Duration|Throughput|Issued|Eligible|Warp Cycles" | head -12 >> $O
ncu -i /tmp/attn.ncu-rep --page source --csv --print-source sass > /tmp/attn_src.csv 2>/dev/null && \
  timeout 25 python3 ncu_sass_regions.py /tmp/attn_src.csv --top 14 >> $O 2>&1
echo "== done" >> $O
