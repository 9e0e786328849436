# Session 50's last device call (output: session50_final_h100.txt, session50_step_{mma,chained}_h100.json):
# main with the chained kernels as landed (no turns: call 3) and the MoE test's chained bound: the
# chained kernel tests, the MoE op tests, the tiny model's chained figures, and `bench step` in the
# default numerics and under `--fp8-gemm chained` on one machine. Before: `ninja -C build &&
# scripts/gpu_bundle.sh build`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
echo "== kernel tests" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*E2m1*:*ActQuant*:*F16Wgmma*:*Chained*:*ToBf16*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|measure|Expected" /tmp/bits.txt | head -20 >> $O
echo "== test_cuda_ops_attention_moe" >> $O
timeout 60 ./test_cuda_ops_attention_moe > /tmp/moe.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|chained|Expected|Which is" /tmp/moe.txt | head -20 >> $O
echo "== test_model_cuda (chained and exact-math comparisons)" >> $O
timeout 100 ./test_model_cuda --gtest_filter='*Chained*:*AsCloseToExactMath*' > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|measure|Expected|Which is" /tmp/model.txt | head -20 >> $O
for g in mma chained; do
  echo "== bench step --fp8-gemm $g" >> $O
  timeout 100 ./dsv4 bench step --device cuda --model flash --context 8192 --batch 1,16,64 --prefill-lengths 2048,8192 \
    --fp8-gemm $g --json $OUT/step_$g.json >> $O 2>&1; echo "rc=$?" >> $O
done
echo "== done" >> $O
