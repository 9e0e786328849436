# Prepared in session 51, not run (no device machine started): the check of
# session51_chained_decode.patch, applied on main and built: --fp8-gemm chained at
# every size (the chained streamed kernel, registers and piped forms, at decode sizes; the chained
# WGMMA kernel wherever the default takes its staged one). The GPU test binaries of the change
# (the chained linears' rows alone against the whole call, the MoE's 20 tokens alone against 400,
# the tiny model's chunked prefill and decode against one-shot under chained, its figures),
# compute-sanitizer memcheck over the chained streamed kernel's tests and bench_fp8_gemm's batch-1
# rows; then `scripts/ab_step.sh --rounds 2 ./dsv4 ./dsv4_chained -- --device cuda --model flash
# --context 8192 --batch 1,16 --prefill-lengths 8192` for the option's cost at decode.
# Before: `ninja -C build && scripts/gpu_bundle.sh build`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
echo "== memcheck over the chained streamed kernel's tests" >> $O
timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='*ChainedStreamed*' > /tmp/san.txt 2>&1; echo "memcheck rc=$?" >> $O
tail -2 /tmp/san.txt >> $O
set -f  # the filters' stars stay stars
for t in "test_ops_cuda *Chained*:*ActQuant*:CudaOpsCore.*" "test_cuda_ops_attention_moe *" \
         "test_model_cuda *Chained*:*ChunkedPrefill*:*AsCloseToExactMath*:*.WholeModelLogitsDefaultNumerics"; do
  set -- $t
  echo "== $1 $2" >> $O
  timeout 80 ./$1 --gtest_filter="$2" > /tmp/$1.txt 2>&1; echo "rc=$?" >> $O
  grep -E "FAILED|Failure|PASSED|measure.*(chained|Chained|default)|Expected|Which is|first difference" /tmp/$1.txt | head -20 >> $O
done
set +f
echo "== bench_fp8_gemm batch-1 rows" >> $O
timeout 40 ./bench_fp8_gemm 50 "" 1 >> $O 2>&1
echo "== done" >> $O
