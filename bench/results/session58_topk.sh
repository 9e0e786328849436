# Session 58's second device call (output: session58_topk_h100.txt or _h200.txt): the top-k with
# its one-CTA path inside cluster launches and the split chosen by the rows' room and the batch.
# Its tests and sanitizers, bench_indexer against main's, an A/B of decode steps at batches 1, 16
# and 64 of main (dsv4_base), session 56's top-k (dsv4_t) and this one (dsv4), a trace at batch 1,
# then the whole GPU suite. Before, from main: build, keep dsv4 as /tmp/s55/dsv4_base and
# bench_indexer as /tmp/s55/bench_indexer_base; apply bench/results/session56_topk.patch, build,
# keep dsv4 as /tmp/s58/dsv4_t; the change on top of it, build; `scripts/gpu_bundle.sh build --with
# dsv4_base=/tmp/s55/dsv4_base --with dsv4_t=/tmp/s58/dsv4_t --with
# bench_indexer_base=/tmp/s55/bench_indexer_base`; carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== indexer tests" >> $O
timeout 90 ./test_indexer_cuda 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error" | head -20 >> $O
echo "== sanitizers" >> $O
for tool in memcheck racecheck synccheck; do
  ( timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 ./test_indexer_cuda \
    --gtest_filter='*Select*:*DecodeBatch1At8k*:*TopkCtas*' > /tmp/topk_$tool.log 2>&1; echo "rc=$?" >> /tmp/topk_$tool.log ) &
done
wait
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(grep -E '^rc=' /tmp/topk_$tool.log) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/topk_$tool.log | tail -1)" >> $O
done
echo "== bench_indexer" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 60 ./bench_indexer$v 5 >> $O 2>&1; done
echo "== ab_step base / session 56's top-k (new1) / this one (new2)" >> $O
timeout 400 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_t ./dsv4 -- \
  --device cuda --model flash --context 8192 --batch 1,16,64 2>&1 | grep -v "^ab_step: round" >> $O
echo "== trace batch 1" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 2>&1 | grep -E "^decode" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 30 >> $O 2>&1
echo "== GPU suite" >> $O
OUT=/tmp/suite GPU_SANITIZE=0 GPU_BENCH=0 timeout 420 bash gpu_run.sh > /tmp/gpu_suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^== |PASSED|FAILED|Failure|skipped" /tmp/gpu_suite.txt >> $O
echo "== done" >> $O
