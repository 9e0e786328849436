# Session 63, call 2: main with session63_rope_runs.patch alone (what landed; the patch is gone), against main
# (dsv4_base): the op test, the step, the model suite, traces of both builds' rope launches and
# memcheck on the rope kernels.
# Bundle: `scripts/gpu_bundle.sh build --with dsv4_base=<main's dsv4>`. Output: session63_call2_<gpu>.txt.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== op test" >> $O
timeout 30 ./test_ops_cuda --gtest_filter='*Rope*' 2>&1 | grep -E "^\[  (PASSED|FAILED|  OK)|Failure" >> $O
echo "== ab_step prefill 8192 + decode b=1: main against RoPE's runs" >> $O
timeout 200 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== test_ops_cuda and test_model_cuda" >> $O
for t in test_ops_cuda test_model_cuda; do
  timeout 100 ./$t > /tmp/$t.log 2>&1; echo "$t rc=$?" >> $O
  grep -E "^\[  PASSED|^\[  FAILED|\[measure\] (default|exact-math) logits" /tmp/$t.log | head -8 >> $O
done
for b in dsv4_base dsv4; do
  echo "== trace prefill 8192 and decode b=1: $b (rope launches)" >> $O
  DSV4_TRACE_OUT=/tmp/$b.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 45 ./$b bench step \
    --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /dev/null 2>&1
  python3 trace_summary.py /tmp/$b.csv --eager --by-grid --top 200 2>&1 | grep rope_kernel >> $O
  python3 trace_summary.py /tmp/$b.csv --by-grid --top 200 2>&1 | grep rope_kernel >> $O
done
echo "== compute-sanitizer memcheck" >> $O
timeout 40 compute-sanitizer --tool memcheck --kernel-regex kns=rope ./test_ops_cuda --gtest_filter='*Rope*' > /tmp/cs.log 2>&1
echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED" /tmp/cs.log | head -3 >> $O
echo "== done" >> $O
