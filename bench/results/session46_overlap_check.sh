# Session 46's second device call: the f16-wgmma kernels' lean epilogue (store_item_sums: dtype and
# column bounds tested once, a stepping row pointer, hardware bf16 pairs) with the dense kernels'
# stores moved under the next item's first block (consume_items, consume_fp8_dense_items). Before:
# `ninja -C build && scripts/gpu_bundle.sh build` (-> .dev/gpu.tar.xz) on branch wip/lean-epilogue;
# .dev/base.tar.xz holds main's (bdc7fe7) dsv4_base, bench_fp8_gemm_base, bench_routed_experts_base;
# .dev/varA.tar.xz the lean epilogue alone (commit 8459104): dsv4_lean, bench_fp8_gemm_lean,
# bench_routed_experts_lean. Run: the device tool with carry [".dev/gpu.tar.xz", ".dev/base.tar.xz",
# ".dev/varA.tar.xz"] and `bash bench/results/session46_overlap_check.sh`; timeouts sum to 560 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G; tar xJf .dev/varA.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O; lscpu | grep 'Model name' >> $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: GEMMs, conversions" >> $O
timeout 130 ./test_ops_cuda --gtest_filter='*Fp8MmaGemm*:*F16Wgmma*:*Bf16MmaGemm*:ConvertCuda.*:E4m3CastCuda.*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|Which is|output, " /tmp/bits.txt | head -24 >> $O
S='Fp8MmaGemmCuda.WgmmaTmaKernelGivesTheCpAsyncKernelsBits:Fp8MmaGemmE2m1StagedCuda.F16WgmmaGivesTheFp8CastBitsGrouped:Shapes/Fp8MmaGemmF16WgmmaCuda.SameBitsAsStaged/m77_n136_k384:Shapes/Fp8MmaGemmF16WgmmaCuda.SameBitsAsStaged/m300_n520_k1152:Fp8MmaGemmStagedCuda.NanCodesGiveTheSameBits'
for tool in racecheck memcheck synccheck; do
  echo "== $tool" >> $O
  timeout 30 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$S" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -12 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== bench_fp8_gemm 8192 rows: base, lean, new" >> $O
for v in base lean; do timeout 25 ./bench_fp8_gemm_$v 10 "" 8192 >> $O 2>&1; done
timeout 25 ./bench_fp8_gemm 10 "" 8192 >> $O 2>&1
echo "== bench_routed_experts: base, lean, new" >> $O
for v in base lean; do timeout 15 ./bench_routed_experts_$v 10 2048 8192 >> $O 2>&1; done
timeout 15 ./bench_routed_experts 10 2048 8192 >> $O 2>&1
echo "== ab default" >> $O
timeout 100 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== model tests" >> $O
timeout 70 ./test_model_cuda > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "^\[measure\].*logits|Failure|FAILED|PASSED" /tmp/model.txt | head -20 >> $O
timeout 30 ./test_model_graphs_cuda 2>&1 | grep -E "FAILED|PASSED" | head -5 >> $O
echo "== ncu: the default f16 dense kernel at wq_b, 8,192 rows" >> $O
timeout 50 ncu --clock-control none -k regex:f16_wgmma_dense --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --section SourceCounters -f -o /tmp/wqb ./bench_fp8_gemm 2 wq_b 8192 > /tmp/ncu.txt 2>&1
ncu -i /tmp/wqb.ncu-rep --page details 2>&1 | grep -E "Duration|Elapsed Cycles" | head -4 >> $O
ncu -i /tmp/wqb.ncu-rep --page source --csv --print-source sass > /tmp/wqb_src.csv 2>/dev/null && \
  python3 ncu_sass_regions.py /tmp/wqb_src.csv --top 4 2>&1 | head -30 >> $O
echo "== done" >> $O
