# Session 47's fifth device call: the split merge of sparse attention's 64-head kernels taking two
# heads a warp at a time (both heads' loads in flight), against main 9e3ef25 (base: the last split
# in shared memory and the discard). Bit tests, racecheck of the CTA-a-token kernel (not yet run on
# it this session), memcheck, bench_sparse_attention, the whole model A/B. Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 560 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: sparse attention" >> $O
timeout 40 ./test_ops_cuda --gtest_filter='*SparseAttn*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|values, first" /tmp/bits.txt | head -24 >> $O
echo "== bench_sparse_attention: base, new, base, new" >> $O
for v in _base "" _base ""; do echo "-- bench_sparse_attention$v" >> $O; timeout 30 ./bench_sparse_attention$v 5 >> $O 2>&1; done
echo "== ab default" >> $O
timeout 130 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1,16 >> $O 2>&1
A='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/HcaProHeads'
echo "== memcheck $A" >> $O
timeout 40 compute-sanitizer --tool memcheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$A" 2>&1 \
  | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
echo "== racecheck CsaDeep" >> $O
timeout 200 compute-sanitizer --tool racecheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep' 2>&1 | grep -v "Host Frame" \
  | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
echo "== done" >> $O
