# Session 48's second device call (output: session48_scatter_h100.txt): the routed experts' input
# quantised a token at a time and scattered to its k rows (act_quant's scatter_rows) against the
# build before it (f621e90, dsv4_base2), alone on the GPU; then a trace of an 8k prefill by grid,
# ncu of the indexer's prefill score kernel (the next candidate), and, together, all GPU tests
# (gpu_run.sh without sanitizers or benchmarks) beside racecheck of the staged partial stores
# (CsaDeep) and of the norms, and memcheck of the scatter's tests. Before: `ninja -C build &&
# scripts/gpu_bundle.sh build`; dsv4_base2 beside session 48's first base in .dev/base.tar.xz.
# Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; ~400 s (timeouts 650, most never reached).
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/dsv4-tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/dsv4-tiny
echo "== bit tests: act_quant, the MoE" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*ActQuant*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
timeout 60 ./test_cuda_ops_attention_moe --gtest_filter='*Moe*:*Fp4Experts*' >> /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran" /tmp/bits.txt | head -24 >> $O
echo "== ab: f621e90 (base2) against the scatter" >> $O
timeout 110 bash ab_step.sh --rounds 2 ./dsv4_base2 ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
echo "== trace: one 8k prefill (eager kernels by grid)" >> $O
DSV4_TRACE_OUT=/tmp/prefill8k.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 100 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/p.txt 2>&1
echo "rc=$?" >> $O
python3 trace_summary.py --eager --by-grid --top 45 /tmp/prefill8k.csv >> $O 2>&1
echo "== ncu: the indexer's score kernel, an 8k prefill launch" >> $O
timeout 80 ncu --clock-control none -k regex:mma_score_kernel --launch-skip 0 --launch-count 40 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy -f -o /tmp/idx ./bench_indexer 1 > /tmp/ncu.txt 2>&1
ncu -i /tmp/idx.ncu-rep --page details --print-units base 2>&1 | grep -E "mma_score|Duration|Throughput|Issued|Eligible|Achieved Occ|Block Limit|Grid Size|Stall" | tail -40 >> $O
echo "== all GPU tests, beside racecheck (CsaDeep; the norms) and memcheck (act_quant, the MoE)" >> $O
( timeout 170 compute-sanitizer --tool racecheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='Cases/SparseAttnWgmmaTest.GivesTheMmaSyncBits/CsaDeep' > /tmp/rc1.txt 2>&1; echo "racecheck CsaDeep rc=$?" >> /tmp/rc1.txt ) &
( timeout 170 compute-sanitizer --tool racecheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='*RmsNorm*' > /tmp/rc2.txt 2>&1; echo "racecheck RmsNorm rc=$?" >> /tmp/rc2.txt ) &
( timeout 170 compute-sanitizer --tool memcheck --print-limit 4 --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='*ActQuant*' > /tmp/mc1.txt 2>&1; echo "memcheck ActQuant rc=$?" >> /tmp/mc1.txt; \
  timeout 100 compute-sanitizer --tool memcheck --print-limit 4 --error-exitcode 1 ./test_cuda_ops_attention_moe \
  --gtest_filter='*MoeExperts*' >> /tmp/mc1.txt 2>&1; echo "memcheck MoeExperts rc=$?" >> /tmp/mc1.txt ) &
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 240 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "gpu_run rc=$?" >> $O
grep -E "^==|FAILED|skipped|measure|PASSED|rc=" /tmp/suite.txt | head -60 >> $O
wait
for f in /tmp/rc1.txt /tmp/rc2.txt /tmp/mc1.txt; do grep -v "Host Frame" $f | grep -E "=====|FAILED|PASSED|rc=" | head -12 >> $O; done
echo "== done" >> $O
