# Session 50's third device call (output: session50_turns_h100.txt; every GPU test's summary in
# session50_suite_h100.txt): the chained consumers' two
# warpgroups taking turns to issue a block's WGMMAs (TensorTurns, as the f16 e2m1 kernel's do), so
# that one warpgroup's pass end (its wait for its MMAs, the pass's sum) runs under the other's
# MMAs: the kernel and MoE tests and the sanitizers on the build (turns in both chained kernels),
# bench_routed_experts without turns (_drain) and with (_turns), and the step A/B under
# `--fp8-gemm chained`: dsv4_drain (main 3c70e9d) against the build (turns in both kernels).
# Carry [".dev/gpu.tar.xz", ".dev/variants.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/variants.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
for b in dsv4 dsv4_drain; do
  printf '#!/bin/bash\nexec %s/%s "$@" --fp8-gemm chained\n' $G $b > $G/${b}_chained; chmod +x $G/${b}_chained
done
echo "== kernel and MoE tests" >> $O
timeout 90 ./test_ops_cuda --gtest_filter='*E2m1*:*ActQuant*:*F16Wgmma*:*Chained*:*ToBf16*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|differ|measure|Expected|got" /tmp/bits.txt | head -30 >> $O
timeout 60 ./test_cuda_ops_attention_moe --gtest_filter='*Fp4Experts*' > /tmp/moe.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|measure|Expected|Which is" /tmp/moe.txt | head -20 >> $O
for tool in memcheck racecheck synccheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*ChainedBf16Wgmma*' 2>&1 | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O
  echo "rc=${PIPESTATUS[0]}" >> $O
done
for r in 1 2; do
  for v in drain turns; do
    echo "== bench_routed_experts $v, round $r" >> $O; timeout 40 ./bench_routed_experts_$v 10 2048 8192 | grep chained >> $O 2>&1
  done
done
echo "== ab, both --fp8-gemm chained: drain (base) against turns (new)" >> $O
timeout 160 bash ab_step.sh --rounds 2 ./dsv4_drain_chained ./dsv4_chained -- --device cuda \
  --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== every GPU test (scripts/gpu_run.sh, no sanitizers or benchmarks)" >> $O
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 240 bash gpu_run.sh > $OUT/suite.txt 2>&1; echo "rc=$?" >> $O
grep -E "^== |PASSED|FAILED|skipped" $OUT/suite.txt | head -60 >> $O
echo "== done" >> $O
