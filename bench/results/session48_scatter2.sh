# Session 48's third device call (output: session48_scatter2_h100.txt): the scatter with each
# task's destinations loaded beside its x (and its own kernel instantiation), against f621e90
# (dsv4_base2): the second call measured a batch-1 step 1.3% slower when each destination was
# loaded after the last store. Then all of test_ops_cuda (the second call's suite ran out of time
# beside the sanitizers there), and ncu of the indexer's score kernel on bench_indexer's 8k prefill
# (its 57th launch: 8 a case, six decode cases and the 2k prefill before it). Before: `ninja -C
# build && scripts/gpu_bundle.sh build`. Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; ~300 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== ab: f621e90 (base2) against the scatter" >> $O
timeout 150 bash ab_step.sh --rounds 3 ./dsv4_base2 ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1,16 >> $O 2>&1
echo "== test_ops_cuda, test_cuda_ops_attention_moe (MoE)" >> $O
timeout 200 ./test_ops_cuda > /tmp/ops.txt 2>&1; echo "rc=$?" >> $O
timeout 60 ./test_cuda_ops_attention_moe --gtest_filter='*Moe*:*Fp4Experts*' >> /tmp/ops.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|SKIPPED" /tmp/ops.txt | head -24 >> $O
echo "== memcheck: act_quant" >> $O
timeout 40 compute-sanitizer --tool memcheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter='*ActQuant*' 2>&1 \
  | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -8 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
echo "== ncu: the indexer's score kernel, bench_indexer's 8k prefill" >> $O
timeout 90 ncu --clock-control none -k regex:mma_score_kernel --launch-skip 56 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy --section SourceCounters -f -o /tmp/idx ./bench_indexer 1 > /tmp/ncu.txt 2>&1
ncu -i /tmp/idx.ncu-rep --page details --print-units base 2>&1 | grep -E "mma_score|Duration|Throughput|Issued|Eligible|Achieved Occ|Block Limit|Stall" | head -30 >> $O
ncu -i /tmp/idx.ncu-rep --page source --csv --print-source sass > /tmp/idx_src.csv 2>/dev/null && \
  python3 ncu_sass_regions.py /tmp/idx_src.csv --top 14 >> $O 2>&1
echo "== done" >> $O
