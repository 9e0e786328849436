# Session 57's shortest device call (same bundle as session57_decode.sh; output
# session57_check_h200.txt or _h100.txt): the tests of the top-k and of the cluster forms of hc_pre
# and gate_route_plan, memcheck / racecheck / synccheck of them, then bench_indexer against main's,
# for a call with about three minutes of device time; the step's timings wait for
# session57_decode.sh or _short.sh.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
set -f
echo "== tests" >> $O
timeout 40 ./test_ops_cuda --gtest_filter='*Mhc*:*GateRoutePlan*' 2>&1 | \
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|differs|error" | head -20 >> $O
timeout 40 ./test_indexer_cuda --gtest_filter='*Select*:*DecodeBatch1At8k*' 2>&1 | \
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
for tool in memcheck racecheck synccheck; do
  ( timeout 70 compute-sanitizer --tool $tool --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*HcPreWithTheNorm*:*GateRoutePlan*' \
    > $OUT/hc_$tool.log 2>&1; echo "rc=$?" >> $OUT/hc_$tool.log ) &
  ( timeout 70 compute-sanitizer --tool $tool --error-exitcode 1 ./test_indexer_cuda \
    --gtest_filter='*Select*:*DecodeBatch1At8k*' \
    > $OUT/topk_$tool.log 2>&1; echo "rc=$?" >> $OUT/topk_$tool.log ) &
done
wait
for f in $OUT/*_memcheck.log $OUT/*_racecheck.log $OUT/*_synccheck.log; do
  echo "$(basename $f): $(grep -E '^rc=' $f) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)" >> $O
done
echo "== bench_indexer" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 25 ./bench_indexer$v 3 >> $O 2>&1; done
echo "== done" >> $O
