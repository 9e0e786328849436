# Session 52's second device call (output: session52_route_h100.txt, the traces' summaries):
# main with moe_route's weighting and sort on the selecting warp (lane i choice i, no thread-0
# loop over a local array: the kernel's 128-byte stack frame gone). Its op tests first; then
# `ab_step` main before it (dsv4_base) against the new build; then kernel traces of a batch-1 step
# with the side streams (by grid, and the first 160 kernels in order) and without them
# (--multi-stream off, in order): whether moe_route's 10-13 us on the routed chain are its own or
# the shared expert's GEMM beside it; then every GPU test (no sanitizers, no benchmarks).
# Before: `ninja -C build && scripts/gpu_bundle.sh build`, main's stripped dsv4 as
# .dev/gpu/dsv4_base, repacked with xz -9. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== moe op tests" >> $O
timeout 60 ./test_cuda_ops_attention_moe --gtest_filter='*MoeRoute*:*Moe*' > /tmp/moe.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|moe_route weights|Expected|Which is" /tmp/moe.txt | head -20 >> $O
echo "== ab_step base / new" >> $O
timeout 200 bash ab_step.sh --rounds 3 --out /tmp/ab ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 \
  --batch 1,16 --prefill-lengths 2048 >> $O 2>&1; echo "rc=$?" >> $O
for ms in auto off; do
  echo "== trace decode b=1, multi-stream $ms" >> $O
  DSV4_TRACE_OUT=/tmp/b1_$ms.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
    --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 --multi-stream $ms >> $O 2>&1
  echo "rc=$?" >> $O
  python3 trace_summary.py /tmp/b1_$ms.csv --by-grid --top 60 > $OUT/trace_b1_${ms}_bygrid.txt 2>&1
  python3 trace_summary.py /tmp/b1_$ms.csv --sequence 200 > $OUT/trace_b1_${ms}_sequence.txt 2>&1
done
echo "== suite" >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 300 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "rc=$?" >> $O
cat /tmp/suite.txt >> $O
echo "== done" >> $O
