# Session 58's fifth device call (output: session58_topk_active_h100.txt or _h200.txt): the top-k's
# row over only as many of the cluster's CTAs as hold it in registers (the launch sizes the cluster
# by the rows' room, up to twice the visible keys in a decode graph), the cluster forms at one
# block an SM. The indexer tests and sanitizers, bench_indexer against main's, an A/B of decode
# steps at 32k (where the room was twice the row) and 8k contexts against main (dsv4_base).
# Before: build main, keep dsv4 as /tmp/s58/dsv4_head and bench_indexer as
# /tmp/s58/bench_indexer_head; build the change; `scripts/gpu_bundle.sh build --with
# dsv4_base=/tmp/s58/dsv4_head --with bench_indexer_base=/tmp/s58/bench_indexer_head`; carry
# [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== indexer tests" >> $O
timeout 90 ./test_indexer_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
for tool in memcheck racecheck synccheck; do
  ( timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 ./test_indexer_cuda \
    --gtest_filter='*Select*:*DecodeBatch1At8k*:*TopkCtas*' > /tmp/topk_$tool.log 2>&1; echo "rc=$?" >> /tmp/topk_$tool.log ) &
done
wait
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(grep -E '^rc=' /tmp/topk_$tool.log) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/topk_$tool.log | tail -1)" >> $O
done
echo "== bench_indexer" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 60 ./bench_indexer$v 5 >> $O 2>&1; done
for ctx in 32768 8192; do
  echo "== ab_step main / the change, context $ctx" >> $O
  timeout 200 bash ab_step.sh --rounds 2 --out /tmp/ab$ctx ./dsv4_base ./dsv4 -- \
    --device cuda --model flash --context $ctx --batch 1,16 2>&1 | grep -v "^ab_step: round" >> $O
done
echo "== done" >> $O
