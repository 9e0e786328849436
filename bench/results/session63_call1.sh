# Session 63's prepared device call (not run: no machine was lent), for the next session: three
# changes, each the same bits as the code it replaces or an order-only change checked against the
# CPU, in order of what they are worth:
#   - session63_hc_mix_mma.patch: the mHC mixes' projections on bf16 tensor cores at every batch
#     size (kernels/mhc/hc_mix_mma, `--hc-mix tensor-cores`, its default; `cuda-cores` keeps main's
#     kernels), expected to take the 8k prefill's 45 ms mix scan to ~7 ms;
#   - session62_norm_rope_quant_warp.patch (a warp a vector at prefill sizes);
#   - session63_rope_runs.patch (RoPE in 16-byte runs; in main since session 63, so the patch is gone).
# Builds: main -> dsv4_base; the three patches applied to main (git apply, in that order) -> every
# binary of the bundle. Bundle: `scripts/gpu_bundle.sh build --with dsv4_base=<main's dsv4>`.
# dsv4_cc (made here) is that build with --hc-mix cuda-cores: base -> dsv4_cc is the last two
# patches, dsv4_cc -> dsv4 the tensor-core projections. Output: session63_call1_<gpu>.txt.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bench_hc_mix: the projections alone, CUDA cores against tensor cores (us, errors against exact sums)" >> $O
timeout 40 ./bench_hc_mix 20 1 16 64 1024 8192 >> $O 2>&1
TESTS='CudaOpsMhc.*:*NormRopeQuant*:*RopeIsBitExact*'
echo "== op tests" >> $O
timeout 40 ./test_ops_cuda --gtest_filter="$TESTS" 2>&1 | grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|Failure|differs" | tail -25 >> $O
SAN_TESTS='CudaOpsMhc.HcPreWithTheNorm*:CudaOpsMhc.HcPreAndHead*:*NormRopeQuant*:*RopeIsBitExact*'
sanitize() {
  echo "== compute-sanitizer $1" >> $O
  timeout $2 compute-sanitizer --tool $1 --kernel-regex kns='rope|hc_mix_mma|hc_pre_fused_mma' ./test_ops_cuda \
    --gtest_filter="$SAN_TESTS" > /tmp/cs_$1.log 2>&1
  echo "rc=$?" >> $O; grep -E "ERROR SUMMARY|PASSED|FAILED|RACECHECK SUMMARY" /tmp/cs_$1.log | head -4 >> $O
}
sanitize memcheck 50
echo "== ab_step prefill 8192 + decode b=1: main, the two patches (dsv4_cc), and the tensor-core projections" >> $O
printf '#!/bin/sh\nexec "$(dirname "$0")/dsv4" "$@" --hc-mix cuda-cores\n' > dsv4_cc && chmod +x dsv4_cc
timeout 230 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4_cc ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== op and model suites (the tiny model's figures against the CPU)" >> $O
OUT=/tmp/suite GPU_TESTS="test_ops_cuda test_model_cuda" GPU_SANITIZE=0 GPU_BENCH=0 timeout 130 bash gpu_run.sh \
  > /tmp/suite.log 2>&1; echo "rc=$?" >> $O
grep -E "^== |FAILED|PASSED|skipped|Failure|median|argmax" /tmp/suite.log | head -60 >> $O
cp /tmp/suite.log $OUT/suite.log
echo "== trace prefill 8192 and decode b=1" >> $O
DSV4_TRACE_OUT=/tmp/pf.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 50 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 2>&1 | grep -E "^prefill|^decode" >> $O
python3 trace_summary.py /tmp/pf.csv --eager --by-grid --top 80 > $OUT/trace_prefill.txt 2>&1
grep -E "hc_mix|hc_pre|norm_rope|rms_norm_warp|rope_kernel" $OUT/trace_prefill.txt >> $O
python3 trace_summary.py /tmp/pf.csv --by-grid --top 60 > $OUT/trace_decode_b1.txt 2>&1
sanitize racecheck 30
sanitize synccheck 30
echo "== done" >> $O
