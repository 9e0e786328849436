# Session 59 call 3: the whole-tile kernel as landed (the plan's whole_tiles for tokens of 3+ splits):
# the op and model tests, the sanitizers on it, its launches, and the step against main.
# Output: session59_landed_h100.txt (or _h200). Before: main (46a091e) as dsv4_base beside the
# build (`scripts/gpu_bundle.sh build --with dsv4_base=...`).
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== op and model tests" >> $O
OUT=/tmp/suite GPU_TESTS="test_ops_cuda test_cuda_ops_attention_moe test_model_cuda" GPU_SANITIZE=0 GPU_BENCH=0 \
  timeout 200 bash gpu_run.sh > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|measure" /tmp/suite.log | head -40 >> $O
F='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaFirst:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/SwaPartialHeads'
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool ./test_ops_cuda --gtest_filter="$F" > /tmp/cs_$tool.log 2>&1; echo "rc=$?" >> $O
  grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$tool.log | head -4 >> $O
done
echo "== bench_sparse_attention prefill" >> $O
timeout 40 ./bench_sparse_attention 10 prefill 2>&1 | grep prefill >> $O
echo "== ab_step prefill 8192 + decode b=1" >> $O
timeout 120 bash ab_step.sh --rounds 1 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== done" >> $O
