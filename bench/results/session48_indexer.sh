# Session 48's fourth device call (output: session48_indexer_h100.txt): the indexer's score kernel
# finding each tile's key rows a tile ahead, a key a thread, into shared memory (the copies read
# them there), against main before it (bench_indexer_base); and the routed experts' scatter for
# prefill-sized calls only (the gather kept below 512 tokens), both against f621e90 (dsv4_base2)
# in the whole model. The indexer's and act_quant's tests, their sanitizers. Before: `ninja -C
# build && scripts/gpu_bundle.sh build`; bench_indexer_base added to .dev/base.tar.xz. Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; ~330 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: the indexer, act_quant" >> $O
timeout 90 ./test_indexer_cuda > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
timeout 60 ./test_cuda_ops_attention_moe --gtest_filter='*Indexer*:*Moe*' >> /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
timeout 30 ./test_ops_cuda --gtest_filter='*ActQuant*' >> /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran" /tmp/bits.txt | head -24 >> $O
echo "== bench_indexer: base, new, base, new" >> $O
for v in _base "" _base ""; do echo "-- bench_indexer$v" >> $O; timeout 40 ./bench_indexer$v 5 >> $O 2>&1; done
echo "== ab: f621e90 (base2) against the indexer and the prefill-only scatter" >> $O
timeout 150 bash ab_step.sh --rounds 3 ./dsv4_base2 ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1,16 >> $O 2>&1
A='IndexerCudaTest.DecodeBatch16At8k:IndexerCudaTest.Prefill1024TokensAt7k:IndexerCudaTest.MixedBatch*:IndexerCudaTest.ToyTwentyHeads:IndexerCudaTest.NoVisibleKeys'
for tool in memcheck racecheck synccheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_indexer_cuda --gtest_filter="$A" 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== done" >> $O
