# Session 49's last device calls (output: session49_final_h100.txt, session49_step_final_h100.json,
# then session49_suite_h100.txt from the second script, session49_suite.sh): main at the session's
# end against its start (1200cbd, dsv4_base) on one machine: the step A/B (prefills 2k/8k, batches
# 1/16/64: hc_pre_finish's decode form changed too), the whole step with its floors (JSON), the mHC
# bit tests and sanitizers. Before: `ninja -C build && scripts/gpu_bundle.sh build`; dsv4_base in
# .dev/base.tar.xz. Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 520 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: mHC" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*Mhc*:*RmsNorm*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|differs" /tmp/bits.txt | head -24 >> $O
for tool in memcheck synccheck racecheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter='*Mhc*' 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== ab: 1200cbd (the session's start) against the end" >> $O
timeout 200 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1,16,64 >> $O 2>&1
echo "== bench step (final)" >> $O
timeout 100 ./dsv4 bench step --device cuda --model flash --context 8192 --batch 1,16,64 --prefill-lengths 2048,8192 \
  --json $OUT/step_final.json >> $O 2>&1; echo "rc=$?" >> $O
echo "== done" >> $O
