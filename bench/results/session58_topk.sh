# Session 58's top-k calls on the device, CALL=landed|long|active (outputs session58_topk_h100.txt,
# session58_long_h100.txt, session58_topk_active_h100.txt; folded into one script after they ran,
# the same steps).
# - landed: the top-k with its one-CTA path inside cluster launches and the split chosen by the
#   rows' room and the batch. Its tests and sanitizers, bench_indexer against main's, an A/B of
#   decode steps at batches 1, 16 and 64 of main (dsv4_base), session 56's top-k (dsv4_t) and this
#   one (dsv4), a trace at batch 1, then the whole GPU suite. Before, from main (ff68cfd): build,
#   keep dsv4 as /tmp/s55/dsv4_base and bench_indexer as /tmp/s55/bench_indexer_base; apply
#   bench/results/session56_topk.patch (removed once landed), build, keep dsv4 as /tmp/s58/dsv4_t;
#   the change on top of it, build; `scripts/gpu_bundle.sh build --with dsv4_base=/tmp/s55/dsv4_base
#   --with dsv4_t=/tmp/s58/dsv4_t --with bench_indexer_base=/tmp/s55/bench_indexer_base`.
# - long: the landed top-k (dsv4) against main before it (dsv4_base, ff68cfd) where rows are long:
#   decode steps at 32k and 64k contexts, batches 1 and 16, and the contexts' prefills; a trace at
#   64k. Bundle: `--with dsv4_base=/tmp/s55/dsv4_base`.
# - active: the row over only as many of the cluster's CTAs as hold it in registers
#   (session58_topk_active.patch on main at 7fcd88b). The tests and sanitizers, bench_indexer
#   against main's, an A/B of decode steps at 32k and 8k. Before: build main, keep dsv4 as
#   /tmp/s58/dsv4_head and bench_indexer as /tmp/s58/bench_indexer_head; apply the patch, build;
#   bundle `--with dsv4_base=/tmp/s58/dsv4_head --with bench_indexer_base=/tmp/s58/bench_indexer_head`.
# Each carries [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
CALL=${CALL:-landed}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
# ab CONTEXT BATCHES BINARIES...: best of two rounds of each binary against the first.
ab() {
  local ctx=$1 batches=$2; shift 2
  echo "== ab_step $*, context $ctx" >> $O
  timeout 400 bash ab_step.sh --rounds 2 --out /tmp/ab$ctx "$@" -- --device cuda --model flash --context $ctx \
    --batch $batches 2>&1 | grep -v "^ab_step: round" >> $O
}
# trace CONTEXT: a batch-1 step's kernels by grid.
trace() {
  echo "== trace batch 1, context $1" >> $O
  DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 90 ./dsv4 bench step \
    --device cuda --model flash --context $1 --batch 1 --repeats 1 --iters 4 2>&1 | grep -E "^decode" >> $O
  python3 trace_summary.py /tmp/b1.csv --by-grid --top 30 >> $O 2>&1
}
if [ "$CALL" = long ]; then
  ab 32768 1,16 ./dsv4_base ./dsv4
  ab 65536 1,16 ./dsv4_base ./dsv4
  trace 65536
  echo "== done" >> $O
  exit 0
fi
echo "== indexer tests" >> $O
timeout 90 ./test_indexer_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
echo "== sanitizers" >> $O
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
if [ "$CALL" = active ]; then
  ab 32768 1,16 ./dsv4_base ./dsv4
  ab 8192 1,16 ./dsv4_base ./dsv4
  echo "== done" >> $O
  exit 0
fi
ab 8192 1,16,64 ./dsv4_base ./dsv4_t ./dsv4
trace 8192
echo "== GPU suite" >> $O
OUT=/tmp/suite GPU_SANITIZE=0 GPU_BENCH=0 timeout 420 bash gpu_run.sh > /tmp/gpu_suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^== |PASSED|FAILED|Failure|skipped" /tmp/gpu_suite.txt >> $O
echo "== done" >> $O
