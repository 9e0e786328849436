# Session 49's last device call (output: session49_merge_h100.txt): merge_splits' count of the
# splits read from the workspace computed once (the WGMMA kernels' PTX changed): the sparse
# attention bit tests and bench_sparse_attention base and new alternating. Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"] (bench_sparse_attention_base: main before the change);
# timeouts sum to 240 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: sparse attention" >> $O
timeout 90 ./test_ops_cuda --gtest_filter='*SparseAttn*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran" /tmp/bits.txt | head -12 >> $O
timeout 60 ./test_cuda_ops_attention_moe --gtest_filter='*Attention*' > /tmp/bits2.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran" /tmp/bits2.txt | head -6 >> $O
echo "== bench_sparse_attention: base, new, base, new" >> $O
for v in _base "" _base ""; do echo "-- bench_sparse_attention$v" >> $O; timeout 22 ./bench_sparse_attention$v 5 prefill >> $O 2>&1; done
echo "== done" >> $O
