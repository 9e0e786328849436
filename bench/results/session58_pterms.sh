# Session 58's fourth device call (output: session58_pterms_h100.txt or _h200.txt): sparse
# attention's probabilities as 2 bf16 terms (hi, mid: 16 significant bits) instead of 3 (all 24),
# a third fewer value-product MMAs, and as 1 (bf16 p, FlashMLA's) for scale. Sparse attention's
# tests at 2 terms with the sanitizers, the tiny model's GPU-vs-CPU logits at 3, 2 and 1 terms,
# bench_sparse_attention at each, an A/B of decode steps and an 8k prefill, then the GPU suite.
# Before: set kProbabilityTerms in kernels/attention/sparse_attn_softmax.cuh to 3, build dsv4,
# bench_sparse_attention and test_model_cuda, keep them as /tmp/s58/dsv4_p3, bsa_p3,
# test_model_cuda_p3; the same at 1 (_p1, and test_ops_cuda_p1); then 2 and build all;
# `scripts/gpu_bundle.sh build --with dsv4_p3=/tmp/s58/dsv4_p3 --with dsv4_p1=/tmp/s58/dsv4_p1
# --with bsa_p3=/tmp/s58/bsa_p3 --with bsa_p1=/tmp/s58/bsa_p1 --with
# test_model_cuda_p3=/tmp/s58/test_model_cuda_p3 --with test_model_cuda_p1=/tmp/s58/test_model_cuda_p1`;
# carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
set -f
echo "== sparse attention tests, 2 terms" >> $O
timeout 120 ./test_ops_cuda --gtest_filter='*SparseAttn*' 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|differ" | head -20 >> $O
timeout 120 ./test_cuda_ops_attention_moe 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|differ|measure" | head -30 >> $O
for tool in memcheck racecheck synccheck; do
  ( timeout 200 compute-sanitizer --tool $tool --error-exitcode 1 ./test_ops_cuda --gtest_filter='*SparseAttnWgmma*' \
    > /tmp/sa_$tool.log 2>&1; echo "rc=$?" >> /tmp/sa_$tool.log ) &
done
for v in _p3 "" _p1; do
  echo "== tiny model GPU vs CPU, test_model_cuda$v" >> $O
  timeout 200 ./test_model_cuda$v 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|measure\] .*logits" | head -30 >> $O
done
wait
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(grep -E '^rc=' /tmp/sa_$tool.log) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sa_$tool.log | tail -1)" >> $O
done
set +f
for b in bsa_p3 bench_sparse_attention bsa_p1; do
  echo "== $b" >> $O
  timeout 120 ./$b 10 >> $O 2>&1
done
echo "== ab_step 3 terms (base) / 2 (new1) / 1 (new2)" >> $O
timeout 400 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_p3 ./dsv4 ./dsv4_p1 -- --device cuda --model flash \
  --context 8192 --batch 1,16,64 2>&1 | grep -v "^ab_step: round" >> $O
echo "== GPU suite" >> $O
OUT=/tmp/suite GPU_SANITIZE=0 GPU_BENCH=0 timeout 420 bash gpu_run.sh > /tmp/gpu_suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^== |PASSED|FAILED|Failure|skipped" /tmp/gpu_suite.txt >> $O
echo "== done" >> $O
