# Session 53's first device call (output: session53_gate_route_h100.txt or _h200.txt): the MoE's
# routing of a decode batch in one launch (kernels::gate_route_plan) and session 52's late fork of
# the shared expert (kLateSharedMaxTokens), each alone and together.
# Before: main's dsv4 (before both) copied to /tmp/dsv4_base; the tree with kLateSharedMaxTokens
# = 0 (the fused routing, the shared expert forked first) built as /tmp/dsv4_fused_early; the tree
# as it is (both, 512) as dsv4; `scripts/gpu_bundle.sh build --with dsv4_base=/tmp/dsv4_base --with
# dsv4_fused_early=/tmp/dsv4_fused_early`. Carry [".dev/gpu.tar.xz"]. Cut to fit the device time
# the failed machine starts left (the trace before the suite).
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
echo "== the new kernel's tests, then under memcheck, racecheck, synccheck" >> $O
set -f
F='*GateRoutePlan*:*MoeExperts*:*ExpertPlan*:*MoeRoute*'
timeout 120 ./test_ops_cuda --gtest_filter="$F" 2>&1 | grep -E "OK|FAILED|Failure|PASSED|error" | tail -30 >> $O
timeout 120 ./test_cuda_ops_attention_moe --gtest_filter="$F" 2>&1 | grep -E "OK|FAILED|Failure|PASSED|error" | tail -30 >> $O
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool ./test_ops_cuda --gtest_filter='*GateRoutePlan*' 2>&1 | \
    grep -E "ERROR SUMMARY|PASSED|FAILED|Hazard|Error" | head -5 | sed "s/^/$tool: /" >> $O
done
set +f
echo "== ab_step base / fused (early fork) / fused + late fork below 512" >> $O
timeout 200 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_fused_early ./dsv4 -- --device cuda \
  --model flash --context 8192 --batch 1,16,64 --prefill-lengths 2048 >> $O 2>&1; echo "rc=$?" >> $O
echo "== trace decode b=1" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 >> $O 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 60 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 200 > $OUT/trace_b1_sequence.txt 2>&1
echo "== suite" >> $O
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 240 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
cat /tmp/suite.txt >> $O
echo "== done" >> $O
