# Session 54's first device call (output: session54_fused_rows_h100.txt or _h200.txt): the kv and
# q paths', compressors' and indexer queries' norm, RoPE, Hadamard and QAT rounding in one launch
# (CudaOps::norm_rope_quant), the window write forked beside the output projections, and the
# attention's hc_post fused into the FFN's hc_pre at batch 1: their tests under the sanitizers, an
# A/B, a batch-1 trace and every GPU test. (Not timed, for want of device time: grids of up to
# 16 blocks launched at the device's greatest priority, bench/results/session54_priority.py.)
# Before: main before the session (d8c054b) built as /tmp/dsv4_base; the fused op alone as
# /tmp/dsv4_fused; with the fork (e5a3b2f) as /tmp/dsv4_fork; main (all three) as dsv4;
# `scripts/gpu_bundle.sh build --with dsv4_base=/tmp/dsv4_base --with dsv4_fused=/tmp/dsv4_fused
# --with dsv4_fork=/tmp/dsv4_fork`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
echo "== the new op's tests, the elementwise ops' and fork/join's, then under memcheck, racecheck, synccheck" >> $O
set -f
F='*NormRopeQuant*:*RmsNorm*:*Rope*:*QuantSim*:*Hadamard*:*CudaOpsMhc*'
timeout 120 ./test_ops_cuda --gtest_filter="$F" 2>&1 | grep -E "OK|FAILED|Failure|PASSED|error|differing [1-9]" | tail -30 >> $O
timeout 120 ./test_fork_join_cuda 2>&1 | grep -E "OK|FAILED|Failure|PASSED|error" | tail -10 >> $O
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool ./test_ops_cuda --gtest_filter='*NormRopeQuant*:*WithThePostMix*' 2>&1 | \
    grep -E "ERROR SUMMARY|PASSED|FAILED|Hazard|Error" | head -5 | sed "s/^/$tool: /" >> $O
done
set +f
echo "== ab_step base / fused op / + window write forked / + hc_post in hc_pre (main)" >> $O
timeout 270 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_fused ./dsv4_fork ./dsv4 -- --device cuda \
  --model flash --context 8192 --batch 1,16,64 >> $O 2>&1; echo "rc=$?" >> $O
echo "== trace decode b=1 (main)" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 >> $O 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 60 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 260 > $OUT/trace_b1_sequence.txt 2>&1
echo "== suite" >> $O
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 200 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^==|PASSED|FAILED|skipped|same ids|differ" /tmp/suite.txt >> $O
echo "== done" >> $O
