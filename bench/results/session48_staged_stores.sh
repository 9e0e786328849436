# Prepared in session 47 for the next device call (not run yet): sparse attention's split rows
# stored 16 bytes a store through per-warp staging rows (branch wip/staged-partial-stores) against
# main, measured properly: the attention bit tests, the sanitizers on the changed kernel,
# bench_sparse_attention base and new alternating in one call, the whole model A/B. Before: build
# the branch (`git checkout wip/staged-partial-stores && ninja -C build && scripts/gpu_bundle.sh
# build`), and main's dsv4 and bench_sparse_attention in a worktree, stripped as dsv4_base and
# bench_sparse_attention_base into .dev/base.tar.xz (see session47_attn_check.sh). Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 560 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: sparse attention" >> $O
timeout 40 ./test_ops_cuda --gtest_filter='*SparseAttn*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|values, first" /tmp/bits.txt | head -24 >> $O
echo "== bench_sparse_attention: base, new, base, new (30 s each: the first run of a binary is slow)" >> $O
for v in _base "" _base ""; do echo "-- bench_sparse_attention$v" >> $O; timeout 30 ./bench_sparse_attention$v 5 >> $O 2>&1; done
echo "== ab default" >> $O
timeout 130 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1,16 >> $O 2>&1
A='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/HcaProHeads'
for tool in memcheck synccheck; do
  echo "== $tool" >> $O
  timeout 40 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$A" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== racecheck CsaDeep (86 s in session 47)" >> $O
timeout 150 compute-sanitizer --tool racecheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep' 2>&1 | grep -v "Host Frame" \
  | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
echo "== done" >> $O
