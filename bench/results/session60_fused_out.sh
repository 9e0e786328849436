# Session 60: sparse attention with the output projection's first half fused in (the rotation
# undone in the attention kernels' stores, and at prefill sizes wo_a's WGMMA operand order too):
# the op and model tests, the sanitizers on the new stores, and the step against main.
# Output: session60_fused_out_h100.txt (or _h200). Before: main (239119b) as dsv4_base beside the
# build (`scripts/gpu_bundle.sh build --with dsv4_base=...`).
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== op and model tests" >> $O
OUT=/tmp/suite GPU_TESTS="test_ops_cuda test_cuda_ops_attention_moe test_model_cuda" GPU_SANITIZE=0 GPU_BENCH=0 \
  timeout 260 bash gpu_run.sh > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|Projection|figures|median|argmax" /tmp/suite.log | head -60 >> $O
cp /tmp/suite.log $OUT/suite.log
F='Flash/SparseAttentionProjectionTest.GivesTheBitsOfTheOpsAfterIt/SwaPrefillLong:Flash/SparseAttentionProjectionTest.GivesTheBitsOfTheOpsAfterIt/CsaDecode64'
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer $tool" >> $O
  timeout 70 compute-sanitizer --tool $tool --kernel-regex kns=sparse_attn ./test_cuda_ops_attention_moe \
    --gtest_filter="$F" > /tmp/cs_$tool.log 2>&1; echo "rc=$?" >> $O
  grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$tool.log | head -4 >> $O
done
echo "== compute-sanitizer memcheck, the CSA prefill at 576 tokens" >> $O
timeout 70 compute-sanitizer --tool memcheck --kernel-regex kns=sparse_attn ./test_cuda_ops_attention_moe \
  --gtest_filter='Flash/SparseAttentionProjectionTest.GivesTheBitsOfTheOpsAfterIt/CsaPrefillLong' > /tmp/cs_csa.log 2>&1
echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED" /tmp/cs_csa.log | head -4 >> $O
echo "== ab_step prefill 8192 + decode b=1,16" >> $O
timeout 200 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1,16 >> $O 2>&1
echo "== done" >> $O
