# Session 63, call 1 (prepared, not run: no machine was lent), in place of session 62's call 2:
# norm_rope_quant a warp a vector from 4,096 vectors on (session62_norm_rope_quant_warp.patch) and
# RoPE four pairs a thread in 16-byte runs (session63_rope_runs.patch, applied after it), then ncu
# of the 8k prefill's activation quantisers (the SwiGLU and scatter sources) and hc_pre_finish, the
# next small prefill items. In order of need: the op tests, memcheck on their kernels, the step
# against main (dsv4_base: main; dsv4_nrq: the first patch; dsv4: both), the op and model suites, a
# trace of both patches' 8k prefill and batch-1 step, ncu, racecheck and synccheck.
# Builds: main -> dsv4_base; apply the first patch -> dsv4_nrq; apply the second -> build (tests and
# dsv4). Bundle: `scripts/gpu_bundle.sh build --with dsv4_base=... --with dsv4_nrq=...`.
# Output: session63_call1_<gpu>.txt.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
TESTS='*NormRopeQuant*:*RopeIsBitExact*'
echo "== op tests" >> $O
timeout 30 ./test_ops_cuda --gtest_filter="$TESTS" 2>&1 | tail -5 >> $O
sanitize() {
  echo "== compute-sanitizer $1" >> $O
  timeout $2 compute-sanitizer --tool $1 --kernel-regex kns=rope ./test_ops_cuda --gtest_filter="$TESTS" \
    > /tmp/cs_$1.log 2>&1
  echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$1.log | head -4 >> $O
}
sanitize memcheck 40
echo "== ab_step prefill 8192 + decode b=1: main, the warp-a-vector launch, and with RoPE's runs" >> $O
timeout 220 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4_nrq ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== op and model suites" >> $O
OUT=/tmp/suite GPU_TESTS="test_ops_cuda test_model_cuda" GPU_SANITIZE=0 GPU_BENCH=0 timeout 120 bash gpu_run.sh \
  > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|median|argmax" /tmp/suite.log | head -60 >> $O
cp /tmp/suite.log $OUT/suite.log
echo "== trace prefill 8192 and decode b=1" >> $O
DSV4_TRACE_OUT=/tmp/pf.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 50 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 2>&1 | grep -E "^prefill|^decode" >> $O
python3 trace_summary.py /tmp/pf.csv --eager --by-grid --top 80 > $OUT/trace_prefill.txt 2>&1
grep -E "norm_rope|rms_norm_warp|rope_kernel|hadamard|quant_sim" $OUT/trace_prefill.txt >> $O
python3 trace_summary.py /tmp/pf.csv --by-grid --top 60 > $OUT/trace_decode_b1.txt 2>&1
echo "== ncu: the 8k prefill's first act_quant_fp8 and hc_pre_finish launches" >> $O
timeout 60 ncu --clock-control none -k "regex:act_quant_fp8|hc_pre_finish" --launch-count 14 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy -f -o /tmp/aq ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/ncu.txt 2>&1
ncu -i /tmp/aq.ncu-rep --page details > $OUT/ncu_act_quant.txt 2>&1
grep -E "  [a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occ|L2 Hit" $OUT/ncu_act_quant.txt >> $O
sanitize racecheck 30
sanitize synccheck 30
echo "== done" >> $O
