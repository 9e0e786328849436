# Session 57's shorter device call, for when too little device time is left for session57_decode.sh
# (same bundle; output session57_short_h200.txt or _h100.txt): the tests of the top-k and of
# the cluster forms of hc_pre and gate_route_plan and of the x-quantising GEMMs, the sanitizers,
# an A/B of a batch-1 decode step (main, dsv4_base; session 55-56's three patches, dsv4_t; and
# this session's two, dsv4), bench_indexer against main's.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
set -f
echo "== tests" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*Mhc*:*GateRoutePlan*:*QuantisedX*:*Prefetch*' 2>&1 | \
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|differs|error" | head -20 >> $O
timeout 60 ./test_indexer_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
for tool in memcheck racecheck synccheck; do
  ( timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*HcPreWithTheNorm*:*GateRoutePlan*' \
    > $OUT/hc_$tool.log 2>&1; echo "rc=$?" >> $OUT/hc_$tool.log ) &
  ( timeout 80 compute-sanitizer --tool $tool --error-exitcode 1 ./test_indexer_cuda \
    --gtest_filter='*Select*:*DecodeBatch1At8k*' \
    > $OUT/topk_$tool.log 2>&1; echo "rc=$?" >> $OUT/topk_$tool.log ) &
done
wait
for f in $OUT/*_memcheck.log $OUT/*_racecheck.log $OUT/*_synccheck.log; do
  echo "$(basename $f): $(grep -E '^rc=' $f) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)" >> $O
done
set +f
echo "== ab_step base / quant_x + prefetch + top-k (new1) / and both cluster kernels (new2)" >> $O
timeout 200 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_t ./dsv4 -- --device cuda --model flash \
  --context 8192 --batch 1 >> $O 2>&1; echo "rc=$?" >> $O
echo "== bench_indexer" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 30 ./bench_indexer$v 5 >> $O 2>&1; done
echo "== done" >> $O
