# Session 47's seventh device call (branch wip/staged-partial-stores): sparse attention's 64-head
# kernel storing a split's workspace rows 16 bytes a store through per-warp staging rows in the
# probabilities' shared memory (the same layout and bits), against main 9e3ef25's attention
# (bench_sparse_attention_base). Bit tests and bench_sparse_attention only (the session's device
# time was nearly spent). Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 110 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: sparse attention" >> $O
timeout 30 ./test_ops_cuda --gtest_filter='*SparseAttn*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|values, first" /tmp/bits.txt | head -24 >> $O
for v in _base "" _base ""; do echo "-- bench_sparse_attention$v" >> $O; timeout 20 ./bench_sparse_attention$v 5 prefill >> $O 2>&1; done
echo "== done" >> $O
