# Session 56's shortest device call, prepared and not run (no machine started; output would be
# session56_topk_h200.txt or _h100.txt), for what device time was left: the indexer's top-k in
# adaptive 11-bit radix passes, a long row split over a thread block cluster
# (session56_topk.patch). Its tests, bench_indexer against main's and its sanitizers. Bundle as
# session56_decode.sh's header says; carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
set -f
echo "== indexer tests" >> $O
timeout 60 ./test_indexer_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
echo "== bench_indexer: main's, new" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 30 ./bench_indexer$v 3 >> $O 2>&1; done
echo "== sanitizers (in parallel)" >> $O
for tool in memcheck racecheck synccheck; do
  ( timeout 50 compute-sanitizer --tool $tool --error-exitcode 1 ./test_indexer_cuda --gtest_filter='*Select*:*DecodeBatch1At8k*' \
    > $OUT/topk_$tool.log 2>&1; echo "rc=$?" >> $OUT/topk_$tool.log ) &
done
wait
for f in $OUT/topk_*.log; do
  echo "$(basename $f): $(grep -E '^rc=' $f) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)" >> $O
done
set +f
echo "== done" >> $O
