# Session 57's device call (output: session57_decode_h200.txt or _h100.txt): session 55's patches
# (decode GEMMs quantising x, dsv4_qx; with the L2 prefetch), session 56's top-k (radix passes from
# the keys' range, clusters) and this session's cluster forms of hc_pre (dsv4_hc) and
# gate_route_plan (dsv4). Tests of each, the sanitizers, bench_indexer against main's, an A/B of a
# batch-1 decode step against main (dsv4_base), quant_x (dsv4_qx), the three patches (dsv4_t),
# with hc_pre's cluster form (dsv4_hc) and with both (dsv4); a trace; ncu of the top-k. It replaces
# session 56's calls (session56_decode.sh, session56_topk.sh), which it runs in full.
# Before, from main: build, keep build/tools/dsv4 as /tmp/s55/dsv4_base and bench_indexer as
# /tmp/s55/bench_indexer_base; `git apply` bench/results/session55_quant_x.patch, build, keep dsv4
# as /tmp/s55/dsv4_qx; apply session55_l2_prefetch.patch and session56_topk.patch, build, keep
# dsv4 as /tmp/s57/dsv4_t; apply session57_hc_pre_cluster.patch, build, keep dsv4 as
# /tmp/s57/dsv4_hc; apply session57_gate_route_cluster.patch, build; `scripts/gpu_bundle.sh build
# --with dsv4_base=/tmp/s55/dsv4_base --with dsv4_qx=/tmp/s55/dsv4_qx --with dsv4_t=/tmp/s57/dsv4_t
# --with dsv4_hc=/tmp/s57/dsv4_hc --with bench_indexer_base=/tmp/s55/bench_indexer_base`; carry
# [".dev/gpu.tar.xz"]. SCOPE=short (about five minutes) keeps the tests, the sanitizers,
# bench_indexer and an A/B of main, the three earlier patches and all five; SCOPE=check (about
# three) the new kernels' tests and sanitizers and bench_indexer, for a call with little device
# time left.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
SCOPE=${SCOPE:-full}
full() { [ "$SCOPE" = full ]; }
short() { [ "$SCOPE" = full ] || [ "$SCOPE" = short ]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "scope: $SCOPE" >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
set -f
echo "== op tests (hc_pre's and the gate's cluster forms; short, full: x quantised in the GEMMs, the prefetch)" >> $O
F='*Mhc*:*GateRoutePlan*'
short && F="$F:*QuantisedX*:*Prefetch*:*ActQuant*"
timeout 90 ./test_ops_cuda --gtest_filter="$F" 2>&1 | \
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|differs|error" | head -20 >> $O
echo "== indexer tests (the top-k)" >> $O
timeout 60 ./test_indexer_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
if full; then
  echo "== model tests" >> $O
  timeout 90 ./test_model_multistream_cuda --gtest_filter='*GemmsQuantisingX*' 2>&1 | \
    grep -E "^\[  (PASSED|FAILED) |Failure|differ" | head -10 >> $O
  timeout 90 ./test_model_graphs_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|differ" | head -10 >> $O
fi
echo "== sanitizers (in parallel)" >> $O
for tool in memcheck racecheck synccheck; do
  ( timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*HcPreWithTheNorm*:*GateRoutePlan*' > $OUT/hc_$tool.log 2>&1; echo "rc=$?" >> $OUT/hc_$tool.log ) &
  ( timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 ./test_indexer_cuda \
    --gtest_filter='*Select*:*DecodeBatch1At8k*' > $OUT/topk_$tool.log 2>&1; echo "rc=$?" >> $OUT/topk_$tool.log ) &
done
if short; then
  ( timeout 90 compute-sanitizer --tool memcheck --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*QuantisedX*:-*m2_n528_k8192*:*m1_n144_k16384*:*m8_n264*:*E2m1*' > $OUT/qx_memcheck.log 2>&1
    echo "rc=$?" >> $OUT/qx_memcheck.log ) &
fi
wait
for f in $OUT/*_memcheck.log $OUT/*_racecheck.log $OUT/*_synccheck.log; do
  echo "$(basename $f): $(grep -E '^rc=' $f) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)" >> $O
done
set +f
echo "== bench_indexer" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 40 ./bench_indexer$v 5 >> $O 2>&1; done
if full; then
  echo "== ab_step base / x quantised in the GEMMs (new1) / + prefetch + top-k (new2) / + hc_pre's cluster (new3)" \
    "/ + gate_route_plan's (new4)" >> $O
  timeout 320 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_qx ./dsv4_t ./dsv4_hc ./dsv4 -- \
    --device cuda --model flash --context 8192 --batch 1 >> $O 2>&1; echo "rc=$?" >> $O
elif short; then
  echo "== ab_step base / quant_x + prefetch + top-k (new1) / and both cluster kernels (new2)" >> $O
  timeout 200 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_t ./dsv4 -- --device cuda --model flash \
    --context 8192 --batch 1 >> $O 2>&1; echo "rc=$?" >> $O
fi
if full; then
  echo "== trace batch 1" >> $O
  DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 50 ./dsv4 bench step \
    --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 > /dev/null 2>&1
  python3 trace_summary.py /tmp/b1.csv --by-grid --top 40 > $OUT/trace_b1_bygrid.txt 2>&1
  python3 trace_summary.py /tmp/b1.csv --sequence 260 > $OUT/trace_b1_sequence.txt 2>&1
  timeout 90 ncu --clock-control none -k regex:topk_kernel --launch-count 12 --section SpeedOfLight \
    --section WarpStateStats --section Occupancy --section LaunchStats -f -o /tmp/topk ./bench_indexer 1 \
    > /tmp/ncu.txt 2>&1
  echo "ncu rc=$?" >> $O
  ncu -i /tmp/topk.ncu-rep --page details --print-units base > $OUT/ncu_topk.txt 2>&1
fi
echo "== done" >> $O
