# Session 55's device call, prepared and not run (no machine came; output would be
# session55_quant_x_h200.txt or _h100.txt): the decode GEMMs quantising x themselves (x_bf16,
# dsv4_qx) and with them the L2 prefetch of the weights after small kernels (dsv4). The op tests
# and the model's on/off bit test, an A/B of a decode step against main (dsv4_base) at batch 1,
# memcheck on the new kernels' tests and a batch-1 trace.
# Before, from main at df1e5da: build, keep build/tools/dsv4 as /tmp/s55/dsv4_base; `git apply
# bench/results/session55_quant_x.patch`, build, keep it as /tmp/s55/dsv4_qx; `git apply
# bench/results/session55_l2_prefetch.patch` (on top of the first), build; `scripts/gpu_bundle.sh
# build --with dsv4_base=/tmp/s55/dsv4_base --with dsv4_qx=/tmp/s55/dsv4_qx`; carry
# [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
set -f
echo "== op tests" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*QuantisedX*:*Prefetch*:*ActQuant*' 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
echo "== model tests" >> $O
timeout 60 ./test_model_multistream_cuda --gtest_filter='*GemmsQuantisingX*' 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|differ" | head -10 >> $O
set +f
echo "== ab_step base / x quantised in the GEMMs (new1) / and the L2 prefetch (new2)" >> $O
timeout 170 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_qx ./dsv4 -- --device cuda --model flash \
  --context 8192 --batch 1 >> $O 2>&1; echo "rc=$?" >> $O
set -f
for tool in memcheck; do
  timeout 45 compute-sanitizer --tool $tool --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*QuantisedX*:-*m2_n528_k8192*:*m1_n144_k16384*:*m8_n264*:*E2m1*' > $OUT/$tool.log 2>&1
  echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1)" >> $O
done
set +f
echo "== trace batch 1" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 50 ./dsv4 bench step --device cuda \
  --model flash --context 8192 --batch 1 --repeats 1 --iters 4 > /dev/null 2>&1
python3 trace_summary.py /tmp/b1.csv --by-grid --top 40 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 260 > $OUT/trace_b1_sequence.txt 2>&1
echo "== done" >> $O
