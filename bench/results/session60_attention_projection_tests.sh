# Prepared in session 60, not run (no device machine could be started in the session): the
# attention op with its output projection's first half (session60_attention_projection.patch:
# the rotation undone in the tensor-core attention kernels' stores, and at prefill sizes o stored
# in wo_a's WGMMA operand order). Call 1 of 2: the op, model, graph and multi-stream tests (the new
# SparseAttentionProjectionTest among them) and the sanitizers on the new stores. Build: main with
# the patch applied; `scripts/gpu_bundle.sh build --with dsv4_base=<main's dsv4 without it>`.
# Output: session60_attention_projection_tests_h100.txt (or _h200).
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== op, model, graph and multi-stream tests" >> $O
OUT=/tmp/suite GPU_TESTS="test_cuda_ops_attention_moe test_ops_cuda test_model_cuda test_model_graphs_cuda test_model_multistream_cuda" \
  GPU_SANITIZE=0 GPU_BENCH=0 timeout 300 bash gpu_run.sh > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|Projection|median|argmax" /tmp/suite.log | head -60 >> $O
cp /tmp/suite.log $OUT/suite.log
P='Flash/SparseAttentionProjectionTest.GivesTheBitsOfTheOpsAfterIt'
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --kernel-regex kns=sparse_attn ./test_cuda_ops_attention_moe \
    --gtest_filter="$P/SwaPrefillLong:$P/CsaDecode64:$P/HcaPrefillLong:$P/CsaPrefillLong" > /tmp/cs_$tool.log 2>&1
  echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$tool.log | head -4 >> $O
done
echo "== done" >> $O
