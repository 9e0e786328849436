# Session 56's device call, prepared and not run (no machine started; output would be
# session56_decode_h200.txt or _h100.txt): session 55's patches
# (the decode GEMMs quantising x themselves, dsv4_qx; with the L2 prefetch of the weights after
# small kernels, dsv4_pf) and the indexer's top-k in adaptive 11-bit radix passes, a long row
# split over a thread block cluster (dsv4, bench_indexer, test_indexer_cuda). The op tests and
# the model's on/off bit test, an A/B of a decode step against main (dsv4_base) at batch 1,
# bench_indexer against main's, sanitizers, a batch-1 trace, ncu of the top-k.
# Before, from main at 932ff08: build, keep build/tools/dsv4 as /tmp/s55/dsv4_base and
# build/bench/bench_indexer as /tmp/s55/bench_indexer_base; `git apply
# bench/results/session55_quant_x.patch`, build, keep dsv4 as /tmp/s55/dsv4_qx; `git apply
# bench/results/session55_l2_prefetch.patch`, build, keep dsv4 as /tmp/s55/dsv4_pf; `git apply
# bench/results/session56_topk.patch`, build; `scripts/gpu_bundle.sh build --with
# dsv4_base=/tmp/s55/dsv4_base --with dsv4_qx=/tmp/s55/dsv4_qx --with dsv4_pf=/tmp/s55/dsv4_pf
# --with bench_indexer_base=/tmp/s55/bench_indexer_base`; carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
set -f
echo "== op tests" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*QuantisedX*:*Prefetch*:*ActQuant*' 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
echo "== indexer tests (the top-k's adaptive radix passes)" >> $O
timeout 60 ./test_indexer_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
echo "== model tests" >> $O
timeout 60 ./test_model_multistream_cuda --gtest_filter='*GemmsQuantisingX*' 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|differ" | head -10 >> $O
set +f
echo "== bench_indexer, and ncu of its top-k kernel (stall reasons, every launch of one pass)" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 40 ./bench_indexer$v 5 >> $O 2>&1; done
echo "== sanitizers (in parallel)" >> $O
set -f
for tool in memcheck racecheck; do
  ( timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*QuantisedX*:-*m2_n528_k8192*:*m1_n144_k16384*:*m8_n264*:*E2m1*' > $OUT/$tool.log 2>&1
    echo "rc=$?" >> $OUT/$tool.log ) &
done
for tool in memcheck racecheck synccheck; do
  ( timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 ./test_indexer_cuda --gtest_filter='*Select*:*DecodeBatch1At8k*' \
    > $OUT/topk_$tool.log 2>&1; echo "rc=$?" >> $OUT/topk_$tool.log ) &
done
wait
for f in $OUT/memcheck.log $OUT/racecheck.log $OUT/topk_*.log; do
  echo "$(basename $f): $(grep -E '^rc=' $f) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)" >> $O
done
set +f
echo "== ab_step base / x quantised in the GEMMs (new1) / and the L2 prefetch (new2) / and the top-k (new3)" >> $O
timeout 240 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_qx ./dsv4_pf ./dsv4 -- --device cuda --model flash \
  --context 8192 --batch 1 >> $O 2>&1; echo "rc=$?" >> $O
echo "== trace batch 1" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 50 ./dsv4 bench step --device cuda \
  --model flash --context 8192 --batch 1 --repeats 1 --iters 4 > /dev/null 2>&1
python3 trace_summary.py /tmp/b1.csv --by-grid --top 40 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 260 > $OUT/trace_b1_sequence.txt 2>&1
timeout 90 ncu --clock-control none -k regex:topk_kernel --launch-count 12 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --section LaunchStats -f -o /tmp/topk ./bench_indexer 1 > /tmp/ncu.txt 2>&1; echo "ncu rc=$?" >> $O
ncu -i /tmp/topk.ncu-rep --page details --print-units base > $OUT/ncu_topk.txt 2>&1
echo "== done" >> $O
