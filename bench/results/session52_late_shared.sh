# Prepared in session 52, not run (the session's device time ran out): the check of
# session52_late_shared.patch (output: session52_late_shared_h100.txt): below kLateSharedMaxTokens
# tokens the MoE's shared expert forked after the routing and the routed experts' input
# quantisation, so that the gate, route and plan kernels do not run beside its GEMMs (session 52's
# traces: twice as long beside them at batch 1). Session 30 measured the opposite move (the fork
# right after hc_pre, beside the routing) at b=1 -0.03 / -0.21%, b=16 -0.55 / -0.66%, b=64 -0.19 /
# -0.73%, so the A/B takes batches 1, 16 and 64 and two thresholds: 512 as in the patch (dsv4) and
# 2, batch 1 alone (dsv4_late1). Then every GPU test, a batch-1 trace in order, and ncu of
# hc_pre_fused, moe_route and plan_small in an eager batch-1 step (the b=1 chain's longest small
# kernels: where their time goes).
# Before: main's dsv4 copied to /tmp/dsv4_base; the patch applied with kLateSharedMaxTokens = 2,
# built, its dsv4 copied to /tmp/dsv4_late1; the patch as it is built; `scripts/gpu_bundle.sh build
# --with dsv4_base=/tmp/dsv4_base --with dsv4_late1=/tmp/dsv4_late1`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== ab_step base / late shared below 512 tokens / at batch 1" >> $O
timeout 300 bash ab_step.sh --rounds 3 --out /tmp/ab ./dsv4_base ./dsv4 ./dsv4_late1 -- --device cuda --model flash \
  --context 8192 --batch 1,16,64 --prefill-lengths 2048 >> $O 2>&1; echo "rc=$?" >> $O
echo "== suite" >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 300 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
cat /tmp/suite.txt >> $O
echo "== trace decode b=1" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 >> $O 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 60 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 200 > $OUT/trace_b1_sequence.txt 2>&1
echo "== ncu: hc_pre_fused, moe_route and plan_small in a batch-1 step (eager), where their time goes" >> $O
for k in hc_pre_fused moe_route plan_small; do
  timeout 60 ncu --clock-control none -k regex:$k --launch-skip 20 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters -f -o /tmp/$k ./dsv4 bench step --device cuda --model flash \
    --context 8192 --batch 1 --repeats 1 --iters 1 --cuda-graphs off > /tmp/ncu_$k.txt 2>&1; echo "$k rc=$?" >> $O
  ncu -i /tmp/$k.ncu-rep --page details 2>&1 | grep -E "Duration|Elapsed Cycles|Stall|Warp Cycles" | head -12 >> $O
  ncu -i /tmp/$k.ncu-rep --page source --csv --print-source sass > /tmp/${k}_src.csv 2>/dev/null && \
    python3 ncu_sass_regions.py /tmp/${k}_src.csv --top 4 2>&1 | head -20 >> $O
done
echo "== done" >> $O
