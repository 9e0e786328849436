# Session 50's first device call (output: session50_chained_h100.txt): the chained order for the
# routed experts' FP4 GEMMs at prefill (kChainedBf16Wgmma, `--fp8-gemm chained`): the kernel and
# act_quant tests (bits, rows alone, distance to the staged order), the sanitizers over the chained
# test, bench_routed_experts (f16 against chained, one layer's GEMMs), the tiny model's figures
# (test_model_cuda) and the whole step A/B, default (mma) against chained in the same binary.
# Before: `ninja -C build && scripts/gpu_bundle.sh build`. Carry [".dev/gpu.tar.xz"]; timeouts sum
# to 590 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
printf '#!/bin/bash\nexec %s/dsv4 "$@" --fp8-gemm chained\n' $G > $G/dsv4_chained; chmod +x $G/dsv4_chained
echo "== kernel tests" >> $O
timeout 90 ./test_ops_cuda --gtest_filter='*E2m1*:*ActQuant*:*F16Wgmma*:*Chained*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|differ|measure|Expected|got" /tmp/bits.txt | head -40 >> $O
for tool in memcheck racecheck synccheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
    --gtest_filter='*ChainedBf16WgmmaIsRowwise*:*Bf16ScaledOutput*' 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== bench_routed_experts" >> $O
timeout 60 ./bench_routed_experts 10 2048 8192 >> $O 2>&1
echo "== test_model_cuda" >> $O
timeout 150 ./test_model_cuda > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|measure|Expected|Which is" /tmp/model.txt | head -40 >> $O
echo "== ab: mma (base) against chained (new)" >> $O
timeout 140 bash ab_step.sh --rounds 2 ./dsv4 ./dsv4_chained -- --device cuda --model flash --context 8192 \
  --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== done" >> $O
