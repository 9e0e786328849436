# Session 48's first device call (output: session48_check_h100.txt): three changes against main
# 73f98a9 in one call: the hidden rows' RMS norm on 256 threads a row (rms_norm_wide_kernel),
# prefill-sized linear pairs quantising (or re-laying) x once for both GEMMs, and sparse
# attention's split rows stored 16 bytes a store through per-warp staging rows. The changed
# kernels' tests (bits), the sanitizers on them, bench_sparse_attention base and new alternating,
# and the whole model A/B. Before: `ninja -C build &&
# scripts/gpu_bundle.sh build`, and main's dsv4 and bench_sparse_attention (a worktree build),
# stripped as dsv4_base and bench_sparse_attention_base into .dev/base.tar.xz. Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 540 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: sparse attention, the norms, linear pairs" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*SparseAttn*:*RmsNorm*:*LinearPair*:*PlainGemm*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|values, first" /tmp/bits.txt | head -24 >> $O
echo "== bench_sparse_attention: base, new, base, new (30 s each: the first run of a binary is slow)" >> $O
for v in _base "" _base ""; do echo "-- bench_sparse_attention$v" >> $O; timeout 30 ./bench_sparse_attention$v 5 >> $O 2>&1; done
echo "== ab default" >> $O
timeout 130 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
A='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/HcaProHeads:*RmsNorm*:*LinearPair*'
for tool in memcheck synccheck; do
  echo "== $tool" >> $O
  timeout 50 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$A" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== racecheck CsaDeep and the norms (86 s in session 47 for CsaDeep)" >> $O
timeout 130 compute-sanitizer --tool racecheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep:*RmsNorm*' 2>&1 | grep -v "Host Frame" \
  | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
echo "== done" >> $O
