# Session 64's prepared call (not run: no machine started in the session): three prefill changes
# (bench/results/session64_prefill_small_kernels.patch, applies to main) against main
# (dsv4_base): hc_pre_finish's Sinkhorn in a launch of its own (40 registers instead of 64),
# act_quant's q16 stores in 16-byte runs (the MMA order gathered by shuffles within a half-warp)
# and the post mix two tokens a thread (bf16). Their op tests, bench_act_quant of main / the
# change / the change with 4 blocks a half-warp (kTasksPerHalfWarp = 4), traces of both builds'
# 8k prefill (by kernel), the step A/B, memcheck and synccheck on the changed kernels, then ncu of
# main's small memory-bound prefill kernels (act_quant, hc_pre_finish, hc_post_mix, the q norm).
# Before: build main's dsv4 and bench_act_quant (the bases), apply the patch and build again (and
# once with kTasksPerHalfWarp = 4 for bench_act_quant_st4), then `scripts/gpu_bundle.sh build
# --with dsv4_base=... --with bench_act_quant_base=... --with bench_act_quant_st4=...`.
# Output: session64_call1_<gpu>.txt and its files.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== op tests" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*ActQuant*:*E4m3*:*HcPost*:*CudaOpsMhc*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" >> $O
echo "== bench_act_quant: main, stores in 16-byte runs, + 4 blocks a half-warp " >> $O
for b in bench_act_quant_base bench_act_quant bench_act_quant_st4; do
  echo "-- $b" >> $O; timeout 30 ./$b 20 >> $O 2>&1; done
for b in dsv4_base dsv4; do
  echo "== trace prefill 8192: $b" >> $O
  DSV4_TRACE_OUT=/tmp/$b.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./$b bench step \
    --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 >> $O 2>&1
  python3 trace_summary.py /tmp/$b.csv --eager --by-grid --top 80 > $OUT/trace_prefill_$b.txt 2>&1
  grep -E "act_quant|hc_post_mix|hc_pre_finish" $OUT/trace_prefill_$b.txt >> $O
done
echo "== ab_step prefill 8192 + decode b=1: main against the three changes" >> $O
timeout 200 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
for tool in memcheck synccheck; do
  echo "== compute-sanitizer $tool (the op tests of the changed kernels)" >> $O
  timeout 45 compute-sanitizer --tool $tool --kernel-regex 'kns=act_quant|hc_' ./test_ops_cuda \
    --gtest_filter='*ActQuant*:*HcPost*:*HcPre*' > /tmp/cs.log 2>&1
  echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED" /tmp/cs.log | head -3 >> $O
done
echo "== ncu (main): prefill 8192's act_quant, hc_pre_finish, hc_post_mix, rms_norm_warp" >> $O
timeout 110 ncu -k 'regex:act_quant_fp8|hc_pre_finish|hc_post_mix|rms_norm_warp' --launch-skip 60 --launch-count 8 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats -o /tmp/small ./dsv4_base bench step --device cuda --model flash \
  --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/ncu.log 2>&1
echo "ncu rc=$?" >> $O; tail -3 /tmp/ncu.log >> $O
ncu -i /tmp/small.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
echo "== done" >> $O
