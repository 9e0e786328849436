# Session 50's fifth device call (output: session50_check_h100.txt): after the x quantisation of
# linear() and linear_pair_on_wgmma became one helper (CudaOps::quantise_x) and the chained linear
# op test was added: the linear, act_quant and chained tests, the MoE op tests, every model test,
# and one chained 8k prefill from the CLI. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
./dsv4 make-model --preset tiny --seed 1 --out /tmp/tiny --force > /dev/null 2>&1; export DSV4_TINY_MODEL=/tmp/tiny
echo "== test_ops_cuda: linears, act_quant, chained" >> $O
timeout 90 ./test_ops_cuda --gtest_filter='*Linear*:*ActQuant*:*Chained*:*E2m1*:*F16Wgmma*' > /tmp/ops.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|chained|Expected|Which is" /tmp/ops.txt | head -24 >> $O
echo "== test_cuda_ops_attention_moe" >> $O
timeout 60 ./test_cuda_ops_attention_moe > /tmp/moe.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|chained|Expected" /tmp/moe.txt | head -10 >> $O
echo "== test_model_cuda" >> $O
timeout 120 ./test_model_cuda > /tmp/model.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|Expected|Which is" /tmp/model.txt | head -10 >> $O
echo "== bench step --fp8-gemm chained, prefill 8192" >> $O
timeout 60 ./dsv4 bench step --device cuda --model flash --context 8192 --batch 1 --prefill-lengths 8192 \
  --fp8-gemm chained 2>&1 | grep -E "^prefill|^decode|rc|rror" >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
echo "== done" >> $O
