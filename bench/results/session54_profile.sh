# Session 54's third device call (output: session54_profile_h100.txt or _h200.txt): ncu of the
# batch-1 step's latency-bound kernels on the critical chain (eager, one launch each: mHC's pre
# and the indexer's top-k), then every GPU test on main.
# Before: `scripts/gpu_bundle.sh build`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
for k in hc_pre_fused_kernel topk_kernel; do
  echo "== ncu $k, eager batch 1" >> $O
  timeout 70 ncu --clock-control none -k regex:$k --launch-skip 12 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters -f -o /tmp/$k ./dsv4 bench step --device cuda --model flash \
    --context 8192 --batch 1 --repeats 1 --iters 1 --cuda-graphs off > /tmp/ncu_$k.txt 2>&1; echo "ncu rc=$?" >> $O
  ncu -i /tmp/$k.ncu-rep --page details 2>&1 | grep -E "Duration|Elapsed Cycles|Stall|Warp Cycles|Memory Throughput|Block Size|Grid Size" | head -16 >> $O
  ncu -i /tmp/$k.ncu-rep --page source --csv --print-source sass > /tmp/${k}_src.csv 2>/dev/null && \
    python3 ncu_sass_regions.py /tmp/${k}_src.csv --top 6 2>&1 | head -30 >> $O
done
echo "== suite" >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 170 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^==|PASSED|FAILED|skipped|same ids|differ" /tmp/suite.txt >> $O
echo "== done" >> $O
