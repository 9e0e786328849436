# Session 61, call 2: after call 1 (session61_tests.sh, session61_step.sh on one warm machine)
# showed the projection's stores slow (each lane read back and rotated its stored pairs one at a
# time, the sines in double beside them: HCA's launches +40%) and a batch-1 step +2.5% (q's norm
# and RoPE moved after the layer's fork/join), the fixed build: the rotation's angles once a CTA
# in shared memory, the stored pairs rotated back by the whole CTA in one pass (8 loads a thread
# in flight), the merge kernel's in registers; the prologue fused only where the plan takes the
# WGMMA kernel at any entry count (Ops::fuses_attention_query_prologue), the Q path's own
# norm_rope_quant beside the other chains elsewhere. The step against main first, then a trace,
# the tests and the sanitizers. Bundle: `scripts/gpu_bundle.sh build --with dsv4_base=<main's dsv4>`.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== ab_step prefill 8192 + decode b=1,16,64" >> $O
timeout 150 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1,16,64 >> $O 2>&1
echo "== trace prefill 8192 + decode b=1" >> $O
DSV4_TRACE_OUT=/tmp/pf.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 >> $O 2>&1
python3 trace_summary.py /tmp/pf.csv --eager --by-grid --top 60 > $OUT/trace_prefill.txt 2>&1
echo "== op, model, graph and multi-stream tests" >> $O
OUT=/tmp/suite GPU_TESTS="test_cuda_ops_attention_moe test_ops_cuda test_model_cuda test_model_graphs_cuda test_model_multistream_cuda" \
  GPU_SANITIZE=0 GPU_BENCH=0 timeout 230 bash gpu_run.sh > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|AroundIt|median|argmax" /tmp/suite.log | head -80 >> $O
cp /tmp/suite.log $OUT/suite.log
P='Flash/SparseAttentionProjectionTest.GivesTheBitsOfTheOpsAroundIt'
for tool in memcheck synccheck racecheck; do
  echo "== compute-sanitizer $tool" >> $O
  F="$P/SwaPrefillLong:$P/CsaDecode64:$P/HcaPrefillLong:$P/CsaPrefillLong"; K=sparse_attn
  [ $tool = racecheck ] && F="$P/CsaPrefillLong:$P/HcaDecode16" && K=sparse_attn_wgmma
  timeout 45 compute-sanitizer --tool $tool --kernel-regex kns=$K ./test_cuda_ops_attention_moe \
    --gtest_filter="$F" > /tmp/cs_$tool.log 2>&1
  echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$tool.log | head -4 >> $O
  cp /tmp/cs_$tool.log $OUT/
done
echo "== done" >> $O
