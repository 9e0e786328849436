# Session 47's fourth device call: (1) decode's FP8 GEMMs of up to 8 rows on the piped kernel
# quantising their bf16 x themselves (no act_quant launch before them; the same bits), (2) the packed
# mma.sync attention kernel's copy-only warps meeting the compute warps at one barrier (synccheck
# reported the two __syncthreads as divergent). Bit tests and sanitizers, the model tests, the
# whole model A/B against main 0d08c43 (dsv4_base) and a batch-1 trace. Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 555 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: the GEMMs, conversions, attention" >> $O
timeout 130 ./test_ops_cuda --gtest_filter='*Fp8MmaGemm*:*F16Wgmma*:*Bf16MmaGemm*:ConvertCuda.*:E4m3CastCuda.*:*ActQuant*:*SparseAttn*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|Which is|differing|values, first" /tmp/bits.txt | head -24 >> $O
Q='Fp8MmaGemmCuda.QuantisingXInTheGemmGivesTheActQuantBits'
A='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/SwaPartialHeads:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDecodeOneToken'
for run in "memcheck $Q" "memcheck $A" "synccheck $Q" "synccheck $A" "racecheck $Q"; do
  set -- $run
  echo "== $1 $2" >> $O
  timeout 40 compute-sanitizer --tool $1 --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$2" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== ab default" >> $O
timeout 120 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048 --batch 1,8,16 >> $O 2>&1
echo "== trace: a batch-1 step by grid (new build)" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 45 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 > /tmp/b.txt 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py --by-grid --top 24 /tmp/b1.csv >> $O 2>&1
echo "== model tests" >> $O
timeout 60 ./test_model_cuda > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "^\[measure\].*logits|Failure|FAILED|PASSED" /tmp/model.txt | head -20 >> $O
echo "== done" >> $O
