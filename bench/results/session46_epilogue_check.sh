# Session 46's device call: the f16-wgmma kernels' staged epilogue (store_item_sums through shared
# memory, 16-byte stores) and the hardware bf16 pair conversion (kernels/bf16_cast.cuh). Before:
# `ninja -C build && scripts/gpu_bundle.sh build` (-> .dev/gpu.tar.xz); main's (bdc7fe7) dsv4,
# bench_fp8_gemm and bench_routed_experts, stripped, in .dev/base.tar.xz as dsv4_base,
# bench_fp8_gemm_base, bench_routed_experts_base. Run: the device tool with carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"] and `bash bench/results/session46_epilogue_check.sh`;
# its timeouts sum to 590 s, in priority order.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G; export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O; lscpu | grep 'Model name' >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: GEMMs, conversions" >> $O
timeout 130 ./test_ops_cuda --gtest_filter='*Fp8MmaGemm*:*F16Wgmma*:*Bf16MmaGemm*:ConvertCuda.*:E4m3CastCuda.*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|Which is|output, " /tmp/bits.txt | head -24 >> $O
S='Fp8MmaGemmCuda.WgmmaTmaKernelGivesTheCpAsyncKernelsBits:Fp8MmaGemmE2m1StagedCuda.F16WgmmaGivesTheFp8CastBitsGrouped:Shapes/Fp8MmaGemmF16WgmmaCuda.SameBitsAsStaged/m77_n136_k384:Shapes/Fp8MmaGemmF16WgmmaCuda.SameBitsAsStaged/m300_n520_k1152'
for tool in racecheck memcheck synccheck; do
  echo "== $tool" >> $O
  timeout 30 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$S" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -12 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== bench_fp8_gemm 8192 rows: base, new" >> $O
timeout 25 ./bench_fp8_gemm_base 10 "" 8192 >> $O 2>&1
timeout 25 ./bench_fp8_gemm 10 "" 8192 >> $O 2>&1
echo "== bench_routed_experts: base, new" >> $O
timeout 20 ./bench_routed_experts_base 10 2048 8192 >> $O 2>&1
timeout 20 ./bench_routed_experts 10 2048 8192 >> $O 2>&1
echo "== ab default" >> $O
timeout 100 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== the other GPU tests (no sanitizers, no benches)" >> $O
GPU_SANITIZE=0 GPU_BENCH=0 GPU_TESTS='test_model_cuda test_model_multistream_cuda test_model_graphs_cuda test_cuda_ops_attention_moe test_indexer_cuda test_fork_join_cuda' \
  OUT=/tmp/rest timeout 130 bash gpu_run.sh > /tmp/rest.txt 2>&1; echo "rc=$?" >> $O
grep -E "^== |measure\].*logits|FAILED|Failure|PASSED|skipped|SKIP" /tmp/rest.txt | head -40 >> $O
echo "== ncu: the FP8 dense kernel at wq_b, 8,192 rows, new epilogue" >> $O
timeout 50 ncu --clock-control none -k regex:fp8_wgmma_dense --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --section SourceCounters -f -o /tmp/wqb ./bench_fp8_gemm 2 wq_b 8192 > /tmp/ncu.txt 2>&1
ncu -i /tmp/wqb.ncu-rep --page details 2>&1 | grep -E "Duration|Elapsed Cycles" | head -4 >> $O
ncu -i /tmp/wqb.ncu-rep --page source --csv --print-source sass > /tmp/wqb_src.csv 2>/dev/null && \
  python3 ncu_sass_regions.py /tmp/wqb_src.csv --top 4 2>&1 | head -30 >> $O
echo "== done" >> $O
