# Session 52's first device call (output: session52_first_*.txt and the b=1 trace's sequence):
# main with session51_chained_decode.patch applied (--fp8-gemm chained at every size), the
# last-block count as one acq_rel atomic (kernels/last_block.cuh: hc_pre_fused, sparse attention's
# in-kernel merge) and hc_pre writing y's FP8 quantisation for wq_a and wkv at batch 1 (its
# finishing block quantises: no act_quant launch before the pair). Their GPU tests, memcheck over
# the chained streamed kernel's tests, synccheck over the mHC tests, bench_fp8_gemm's batch-1
# rows; then one five-way `ab_step` (batch 1 and 16, a 2k prefill): main as it was (dsv4_base),
# the new build (dsv4), the new build under --fp8-gemm chained, the build before the quantisation
# in hc_pre (dsv4_arrival: the patch and the acq_rel count), and a timing-only build of the patch
# alone whose Sinkhorn runs one iteration instead of 20 (dsv4_sink1: warp_sinkhorn<4>(c0, 4, 1,
# ...) in post_and_comb: wrong comb, right timing otherwise: how much of a step the Sinkhorn's
# chain holds); then a batch-1 trace's first 160 kernels in order (one layer's chain).
# Before: the bundle with dsv4_base, dsv4_arrival and dsv4_sink1 stripped beside dsv4 in .dev/gpu,
# packed with `xz -9` (near-identical binaries share its dictionary). Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
printf '#!/bin/bash\nexec %s/dsv4 "$@" --fp8-gemm chained\n' $G > $G/dsv4_chained; chmod +x $G/dsv4_chained
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
set -f  # the filters' stars stay stars
for t in "test_ops_cuda *Chained*:*ActQuant*:CudaOpsCore.*:CudaOpsMhc.*:*SparseAttn*" "test_cuda_ops_attention_moe *" \
         "test_model_cuda *Chained*:*ChunkedPrefill*:*AsCloseToExactMath*:*.WholeModelLogitsDefaultNumerics" \
         "test_model_graphs_cuda *"; do
  set -- $t
  echo "== $1 $2" >> $O
  timeout 80 ./$1 --gtest_filter="$2" > /tmp/$1.txt 2>&1; echo "rc=$?" >> $O
  grep -E "FAILED|Failure|PASSED|measure.*(chained|Chained|default)|Expected|Which is|first difference" /tmp/$1.txt | head -20 >> $O
done
set +f
echo "== ab_step base / new / new chained / arrival only / sinkhorn 1 iteration" >> $O
timeout 300 bash ab_step.sh --rounds 2 --out $OUT/ab ./dsv4_base ./dsv4 ./dsv4_chained ./dsv4_arrival ./dsv4_sink1 -- --device cuda --model flash --context 8192 \
  --batch 1,16 --prefill-lengths 2048 >> $O 2>&1; echo "rc=$?" >> $O
echo "== memcheck over the chained streamed kernel's tests" >> $O
timeout 45 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='*ChainedStreamed*' > /tmp/san.txt 2>&1; echo "memcheck rc=$?" >> $O
tail -2 /tmp/san.txt >> $O
echo "== synccheck over the mHC tests" >> $O
timeout 45 /usr/local/cuda/bin/compute-sanitizer --tool synccheck --error-exitcode 1 ./test_ops_cuda \
  --gtest_filter='CudaOpsMhc.*' > /tmp/sync.txt 2>&1; echo "synccheck rc=$?" >> $O
tail -2 /tmp/sync.txt >> $O
echo "== trace decode b=1 sequence" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step --device cuda \
  --model flash --context 8192 --batch 1 --repeats 1 --iters 4 >> $O 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py /tmp/b1.csv --sequence 160 > $OUT/trace_b1_sequence.txt 2>&1
echo "== bench_fp8_gemm batch-1 rows" >> $O
timeout 40 ./bench_fp8_gemm 50 "" 1 >> $O 2>&1
echo "== done" >> $O
