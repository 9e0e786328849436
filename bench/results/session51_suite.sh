# Session 51's first device call (output: session51_suite_h100.txt and the traces' summaries):
# the new tests (the chained order on mma.sync, the chained streamed kernel against the chained
# WGMMA kernel, act_quant's bf16 values in x's own order) and bench_fp8_gemm's decode rows (the
# chained streamed column), every GPU test (session 50's last two commits had not run on a GPU),
# then kernel traces of a batch-1 decode step (graph replays, by
# grid) and of an 8k prefill under --fp8-gemm chained (eager), to pick the next targets.
# Before: `ninja -C build && scripts/gpu_bundle.sh build`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== the new test" >> $O
timeout 90 ./test_ops_cuda --gtest_filter='*ChainedOrderOnMmaSync*:*ChainedStreamed*:*Bf16ScaledOutput*' > /tmp/new.txt 2>&1
echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|Expected|first difference|got =|OK \]" /tmp/new.txt | head -30 >> $O
echo "== bench_fp8_gemm decode rows" >> $O
for m in 1 16 64; do timeout 60 ./bench_fp8_gemm 50 "" $m >> $O 2>&1; done
echo "== trace decode b=1" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 90 ./dsv4 bench step --device cuda \
  --model flash --context 8192 --batch 1 --repeats 1 --iters 4 >> $O 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 60 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 120 > $OUT/trace_b1_sequence.txt 2>&1
echo "== trace prefill 8k chained" >> $O
DSV4_TRACE_OUT=/tmp/p8k.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 90 ./dsv4 bench step --device cuda \
  --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 --fp8-gemm chained >> $O 2>&1
echo "rc=$?" >> $O
python3 trace_summary.py /tmp/p8k.csv --eager --top 60 > $OUT/trace_p8k_chained.txt 2>&1
echo "== suite" >> $O
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 300 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
cat /tmp/suite.txt >> $O
echo "== done" >> $O
