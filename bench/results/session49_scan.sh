# Session 49's fourth device call (output: session49_scan_h100.txt): the mHC mix scan's inner loop,
# which ncu and its SASS (call 3) found bound by instruction issue, not by its loads: dsv4_len32
# tests a position's elements against the chunk's length in 32 bits (a 64-bit compare was five
# instructions beside each element's ten FMAs); dsv4 (the bundle) also lays x's tile and each
# warp's weights out for three shared loads a position instead of seven (95 registers, 54 KB: four
# blocks an SM). Both with main's other session-49 changes; base: main 1200cbd. The mHC bit tests
# and sanitizers, ncu of the scan's first launch with each binary, the model A/B. Before: `ninja -C
# build && scripts/gpu_bundle.sh build`, dsv4_base and dsv4_len32 in .dev/base.tar.xz. Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 520 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: mHC" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*Mhc*:*RmsNorm*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|differs" /tmp/bits.txt | head -24 >> $O
for bin in dsv4_base dsv4_len32 dsv4; do
  echo "== ncu: the mix scan's first launch, $bin" >> $O
  timeout 45 ncu --clock-control none -k "regex:hc_mix_scan" --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section InstructionStats -f -o /tmp/scan_$bin ./$bin bench step --device cuda --model flash --context 8192 \
    --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/ncu.txt 2>&1
  ncu -i /tmp/scan_$bin.ncu-rep --page details 2>&1 | grep -E "Duration|Executed Instructions  |Achieved Occ|Theoretical Occ" >> $O
done
echo "== ab default" >> $O
timeout 200 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4_len32 ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
for tool in memcheck racecheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter='*Mhc*' 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== done" >> $O
