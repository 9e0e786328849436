# Session 47's third device call: the CTA-a-token sparse attention's split partials stored under
# an evict-last L2 policy and discarded from L2 once merged (new), or only discarded (discard),
# against main 8d6dbaf (base: the last split's rows in shared memory). The same bits. Bit tests
# and sanitizers on the attention tests, bench_sparse_attention, ncu's DRAM bytes of one CSA
# prefill launch, the whole model A/B. Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum
# to 560 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: sparse attention" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*SparseAttn*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|Which is|values, first" /tmp/bits.txt | head -24 >> $O
S='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/HcaProHeads:Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/SwaPartialHeads'
for tool in memcheck racecheck synccheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter="$S" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -12 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== bench_sparse_attention prefill: base, discard, new, twice" >> $O
for v in _base _discard "" _base _discard ""; do echo "-- bench_sparse_attention$v" >> $O; timeout 25 ./bench_sparse_attention$v 5 prefill >> $O 2>&1; done
echo "== ncu: one CSA prefill launch, base, discard and new" >> $O
for v in _base _discard ""; do
  echo "-- $v" >> $O
  timeout 40 ncu --clock-control none -k regex:sparse_attn_wgmma --launch-count 1 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_bytes.sum \
    ./bench_sparse_attention$v 1 "csa prefill" 2>&1 | grep -E "gpu__|dram__|lts__" >> $O
done
echo "== ab default" >> $O
timeout 150 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4_discard ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== model tests" >> $O
timeout 60 ./test_model_cuda > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "^\[measure\].*logits|Failure|FAILED|PASSED" /tmp/model.txt | head -20 >> $O
echo "== done" >> $O
