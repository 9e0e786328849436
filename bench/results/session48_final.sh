# Session 48's last device call (output: session48_final_h100.txt, session48_step_final_h100.json;
# its gpu_run.sh ran out of time before test_ops_cuda, which then ran alone in a call of its own:
# session48_test_ops_h100.txt): main at the session's end against its start (73f98a9, dsv4_base)
# in one call on one machine; the whole step with its floors (batches 1/16/64, prefills
# 2k/8k/32k, JSON); every GPU test (gpu_run.sh without sanitizers or benchmarks); memcheck and
# synccheck of the last kernel changes (act_quant, the grouped linear); a trace of an 8k prefill
# by family. Before: `ninja -C build && scripts/gpu_bundle.sh build`; dsv4_base in
# .dev/base.tar.xz. Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 560 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== ab: 73f98a9 (the session's start) against the end" >> $O
timeout 120 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1,16 >> $O 2>&1
echo "== bench step (final)" >> $O
timeout 120 ./dsv4 bench step --device cuda --model flash --context 8192 --batch 1,16,64 --prefill-lengths 2048,32768 \
  --json $OUT/step_final.json >> $O 2>&1; echo "rc=$?" >> $O
echo "== all GPU tests" >> $O
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 200 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "gpu_run rc=$?" >> $O
grep -E "^==|FAILED|skipped|PASSED|cosine|rc=" /tmp/suite.txt | head -40 >> $O
for tool in memcheck synccheck; do
  echo "== $tool: act_quant, the grouped linear" >> $O
  timeout 25 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*ActQuant*:*GroupedLinear*' 2>&1 | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -8 >> $O
  echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== trace: one 8k prefill (eager kernels by family)" >> $O
DSV4_TRACE_OUT=/tmp/prefill8k.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 70 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/p.txt 2>&1
echo "rc=$?" >> $O
python3 trace_summary.py --eager --top 30 /tmp/prefill8k.csv >> $O 2>&1
echo "== done" >> $O
