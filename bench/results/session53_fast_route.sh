# Session 53's second device call (output: session53_fast_route_h100.txt or _h200.txt):
# gate_route_plan with one arrival up to two tokens (the last block of all finishing every
# logit), a finishing thread's 32 sums loaded at once, and the route's selection scanning 8
# experts a lane where E <= 256 (dsv4), against the first call's form (dsv4_fused, main bcd3001)
# and main before the session (dsv4_base); its tests under the sanitizers, every GPU test, then
# ncu of the kernel in an eager batch-1 step (where its time goes).
# Before: /tmp/dsv4_base (19637d2), /tmp/dsv4_fused (bcd3001) copied; the tree built;
# `scripts/gpu_bundle.sh build --with dsv4_base=/tmp/dsv4_base --with dsv4_fused=/tmp/dsv4_fused`.
# Carry [".dev/gpu.tar.xz"]; cut to the ~400 s of device time left.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== the kernel's tests, then under memcheck, racecheck, synccheck" >> $O
set -f
F='*GateRoutePlan*:*MoeExperts*:*MoeRoute*'
timeout 60 ./test_ops_cuda --gtest_filter="$F" 2>&1 | grep -E "OK|FAILED|Failure|PASSED|error" | tail -12 >> $O
timeout 60 ./test_cuda_ops_attention_moe --gtest_filter="$F" 2>&1 | grep -E "OK|FAILED|Failure|PASSED|error" | tail -10 >> $O
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool ./test_ops_cuda --gtest_filter='*GateRoutePlan*' 2>&1 | \
    grep -E "SUMMARY|PASSED|FAILED|azard|rror" | head -5 | sed "s/^/$tool: /" >> $O
done
set +f
echo "== ab_step base / fused (bcd3001) / one arrival up to 2 tokens" >> $O
timeout 130 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_fused ./dsv4 -- --device cuda \
  --model flash --context 8192 --batch 1,16,64 >> $O 2>&1; echo "rc=$?" >> $O
echo "== suite" >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 150 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^==|PASSED|FAILED|skipped|same ids|differ" /tmp/suite.txt >> $O
echo "== ncu gate_route_plan_kernel, eager batch 1" >> $O
timeout 60 ncu --clock-control none -k regex:gate_route_plan --launch-skip 20 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section SourceCounters -f -o /tmp/grp ./dsv4 bench step --device cuda --model flash \
  --context 8192 --batch 1 --repeats 1 --iters 1 --cuda-graphs off > /tmp/ncu_grp.txt 2>&1; echo "ncu rc=$?" >> $O
ncu -i /tmp/grp.ncu-rep --page details 2>&1 | grep -E "Duration|Elapsed Cycles|Stall|Warp Cycles|Memory Throughput" | head -14 >> $O
ncu -i /tmp/grp.ncu-rep --page source --csv --print-source sass > /tmp/grp_src.csv 2>/dev/null && \
  python3 ncu_sass_regions.py /tmp/grp_src.csv --top 6 2>&1 | head -30 >> $O
echo "== done" >> $O
