# Session 54's second device call (output: session54_trig_early_h200.txt or _h100.txt): rope's and
# norm_rope_quant's angles computed before the PDL wait, against main before it (81031f6, the
# fused rows and the forked window write) and the session's base (d8c054b); the bit tests of
# both kernels under memcheck, racecheck and synccheck; a batch-1 trace.
# Before: /tmp/dsv4_base (d8c054b), /tmp/dsv4_fork (81031f6); `scripts/gpu_bundle.sh build --with
# dsv4_base=/tmp/dsv4_base --with dsv4_fork=/tmp/dsv4_fork`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
set -f
F='*NormRopeQuant*:*Rope*:*QuantSim*:*Hadamard*'
timeout 60 ./test_ops_cuda --gtest_filter="$F" 2>&1 | grep -E "OK|FAILED|Failure|PASSED|differing [1-9]" | tail -12 >> $O
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool ./test_ops_cuda --gtest_filter='*NormRopeQuant*:*RopeIsBitExact*' 2>&1 | \
    grep -E "ERROR SUMMARY|PASSED|FAILED|Hazard|Error" | head -5 | sed "s/^/$tool: /" >> $O
done
set +f
echo "== ab_step base / fused rows + forked window write / + angles before the wait (main)" >> $O
timeout 240 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_fork ./dsv4 -- --device cuda \
  --model flash --context 8192 --batch 1,16,64 >> $O 2>&1; echo "rc=$?" >> $O
echo "== trace decode b=1 (main)" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 >> $O 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 60 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 260 > $OUT/trace_b1_sequence.txt 2>&1
echo "== done" >> $O
