# Session 50's second device call (output: session50_depth_h100.txt): the chained order now on the
# dense FP8 linears' f16 WGMMA calls too: its kernel tests, test_model_cuda with the chained model
# (the first call ran it without the tiny model: DSV4_TINY_MODEL unset), the step A/B (mma against
# chained), the e2m1 chained kernel's A registers 2 steps deep (bench_routed_experts, the build)
# against 4 deep (bench_routed_experts_d4, built with DSV4_CHAINED_FRAG_SETS=4), alternating; ncu's
# headline and warp states of one chained gate GEMM.
# Carry [".dev/gpu.tar.xz", ".dev/variants.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/variants.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
printf '#!/bin/bash\nexec %s/dsv4 "$@" --fp8-gemm chained\n' $G > $G/dsv4_chained; chmod +x $G/dsv4_chained
echo "== kernel tests" >> $O
timeout 90 ./test_ops_cuda --gtest_filter='*E2m1*:*ActQuant*:*F16Wgmma*:*Chained*:*ToBf16*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|differ|measure|Expected|got" /tmp/bits.txt | head -40 >> $O
echo "== memcheck, racecheck: dense chained" >> $O
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*ChainedBf16WgmmaDense*:*ScaledMmaOrder*' 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== ab: mma (base) against chained (new)" >> $O
timeout 140 bash ab_step.sh --rounds 2 ./dsv4 ./dsv4_chained -- --device cuda --model flash --context 8192 \
  --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== test_model_cuda" >> $O
timeout 150 ./test_model_cuda > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|measure|Expected|Which is|exception" /tmp/model.txt | head -40 >> $O
for r in 1 2; do
  echo "== depth 2, round $r" >> $O; timeout 40 ./bench_routed_experts 10 2048 8192 >> $O 2>&1
  echo "== depth 4, round $r" >> $O; timeout 40 ./bench_routed_experts_d4 10 2048 8192 >> $O 2>&1
done
echo "== ncu: the chained gate GEMM, 8k tokens (depth 2, then 4)" >> $O
for b in ./bench_routed_experts ./bench_routed_experts_d4; do
  timeout 60 ncu --clock-control none -k regex:e2m1_kernelILb1 --launch-skip 0 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section Occupancy $b 1 8192 2>&1 | grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Active Warps|Registers" | head -30 >> $O
done
echo "== done" >> $O
