# Session 48's fifth device call (output: session48_wo_a_h200.txt: the call got an H200): the grouped bf16 x FP8
# decode kernel (wo_a) loading a warp's next K block's weight rows before this block's MMAs,
# against main f3ac44b (dsv4_head): decode batches 1, 16 and 64. The grouped linear's tests and
# memcheck. Before: `ninja -C build && scripts/gpu_bundle.sh build`; dsv4_head in
# .dev/base.tar.xz. Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; ~150 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: the grouped linear" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*GroupedLinear*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran" /tmp/bits.txt | head -10 >> $O
echo "== ab: f3ac44b (head) against the prefetching wo_a kernel" >> $O
timeout 150 bash ab_step.sh --rounds 3 ./dsv4_head ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048 --batch 1,16,64 >> $O 2>&1
echo "== memcheck" >> $O
timeout 60 compute-sanitizer --tool memcheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter='*GroupedLinear*' 2>&1 \
  | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -8 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
echo "== done" >> $O
