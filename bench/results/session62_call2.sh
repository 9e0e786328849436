# Session 62, call 2: norm_rope_quant in one launch of a warp a vector from 4,096 vectors on (the
# prefill's per-head q norm and RoPE, its kv rows' norm, RoPE and QAT, the indexer's queries'
# RoPE, Hadamard and QAT: one pass over the vectors instead of two or three), main with
# session62_norm_rope_quant_warp.patch applied. Prepared, not run (eleven machine starts refused
# spent the session's device time). In order of need: the op test (NormRopeQuantGivesTheBitsOfTheOpsInTurn: the separate
# ops' bits, and the CPU's without a norm), memcheck on the op test's new kernel, the step against
# main (dsv4_base), a trace of the new build's 8k prefill and batch-1 step, the op and model
# suites, racecheck and synccheck.
# Bundle: `scripts/gpu_bundle.sh build --with dsv4_base=<main's dsv4>`. Output: session62_call2_<gpu>.txt.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== op test" >> $O
timeout 30 ./test_ops_cuda --gtest_filter='*NormRopeQuant*' 2>&1 | tail -5 >> $O
sanitize() {
  echo "== compute-sanitizer $1" >> $O
  timeout 45 compute-sanitizer --tool $1 --kernel-regex kns=norm_rope_quant_warp ./test_ops_cuda \
    --gtest_filter='*NormRopeQuant*' > /tmp/cs_$1.log 2>&1
  echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$1.log | head -4 >> $O
}
sanitize memcheck
echo "== ab_step prefill 8192 + decode b=1: main against the warp-a-vector launch" >> $O
timeout 160 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== trace prefill 8192 and decode b=1" >> $O
DSV4_TRACE_OUT=/tmp/pf.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 70 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 2>&1 | grep -E "^prefill|^decode" >> $O
python3 trace_summary.py /tmp/pf.csv --eager --by-grid --top 80 > $OUT/trace_prefill.txt 2>&1
grep -E "norm_rope|rms_norm_warp|rope_kernel|hadamard|quant_sim" $OUT/trace_prefill.txt >> $O
python3 trace_summary.py /tmp/pf.csv --by-grid --top 60 > $OUT/trace_decode_b1.txt 2>&1
echo "== op and model suites" >> $O
OUT=/tmp/suite GPU_TESTS="test_ops_cuda test_model_cuda" GPU_SANITIZE=0 GPU_BENCH=0 timeout 150 bash gpu_run.sh \
  > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|median|argmax" /tmp/suite.log | head -60 >> $O
cp /tmp/suite.log $OUT/suite.log
sanitize racecheck
sanitize synccheck
echo "== done" >> $O
