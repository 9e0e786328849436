# Session 61, call 1 of 2: session 60's attention projection (bench/results/session60_attention_projection.patch)
# with the queries' prologue on top (the per-head q norm and RoPE inside the WGMMA attention
# kernels): the op, model, graph and multi-stream tests (SparseAttentionProjectionTest's
# GivesTheBitsOfTheOpsAroundIt among them) and the sanitizers on the attention kernels.
# Bundle: `scripts/gpu_bundle.sh build --with dsv4_base=<main's dsv4> --with dsv4_proj=<the projection alone>`.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== op, model, graph and multi-stream tests" >> $O
OUT=/tmp/suite GPU_TESTS="test_cuda_ops_attention_moe test_ops_cuda test_model_cuda test_model_graphs_cuda test_model_multistream_cuda" \
  GPU_SANITIZE=0 GPU_BENCH=0 timeout 320 bash gpu_run.sh > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|AroundIt|median|argmax" /tmp/suite.log | head -80 >> $O
cp /tmp/suite.log $OUT/suite.log
P='Flash/SparseAttentionProjectionTest.GivesTheBitsOfTheOpsAroundIt'
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer $tool" >> $O
  timeout 70 compute-sanitizer --tool $tool --kernel-regex kns=sparse_attn ./test_cuda_ops_attention_moe \
    --gtest_filter="$P/SwaPrefillLong:$P/CsaDecode64:$P/HcaPrefillLong:$P/CsaPrefillLong" > /tmp/cs_$tool.log 2>&1
  echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$tool.log | head -4 >> $O
  cp /tmp/cs_$tool.log $OUT/
done
echo "== done" >> $O
