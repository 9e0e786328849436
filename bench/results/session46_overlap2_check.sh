# Session 46's third device call: as session46_overlap_check.sh (its call measured the lean
# epilogue and the dense kernels' stores under the next item's first block, and lost
# bench_routed_experts to a 15 s timeout), with the dense kernel's first block issued before the
# pass loop rather than peeled out of it (the grouped kernel's loop as before). Trimmed to the
# device budget left (no memcheck or synccheck). Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz",
# ".dev/varA.tar.xz"]; timeouts sum to 430 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G; tar xJf .dev/varA.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O; lscpu | grep 'Model name' >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: GEMMs, conversions" >> $O
timeout 110 ./test_ops_cuda --gtest_filter='*Fp8MmaGemm*:*F16Wgmma*:*Bf16MmaGemm*:ConvertCuda.*:E4m3CastCuda.*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|Which is|output, " /tmp/bits.txt | head -24 >> $O
S='Fp8MmaGemmCuda.WgmmaTmaKernelGivesTheCpAsyncKernelsBits:Fp8MmaGemmE2m1StagedCuda.F16WgmmaGivesTheFp8CastBitsGrouped:Shapes/Fp8MmaGemmF16WgmmaCuda.SameBitsAsStaged/m77_n136_k384:Shapes/Fp8MmaGemmF16WgmmaCuda.SameBitsAsStaged/m300_n520_k1152:Fp8MmaGemmStagedCuda.NanCodesGiveTheSameBits'
for tool in racecheck; do
  echo "== $tool" >> $O
  timeout 35 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$S" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -12 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== bench_routed_experts: base, lean, new" >> $O
for v in base lean; do timeout 25 ./bench_routed_experts_$v 10 2048 8192 >> $O 2>&1; done
timeout 25 ./bench_routed_experts 10 2048 8192 >> $O 2>&1
echo "== bench_fp8_gemm 2048 and 8192 rows: base, new" >> $O
for rows in 8192; do
  timeout 25 ./bench_fp8_gemm_base 10 "" $rows >> $O 2>&1
  timeout 25 ./bench_fp8_gemm 10 "" $rows >> $O 2>&1
done
echo "== ab default" >> $O
timeout 100 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== model tests" >> $O
timeout 60 ./test_model_cuda > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "^\[measure\].*logits|Failure|FAILED|PASSED" /tmp/model.txt | head -20 >> $O
echo "== done" >> $O
