# Prepared in session 60, not run (see session60_attention_projection_tests.sh, call 1 of 2):
# call 2, on the same machine: the step against main (dsv4_base) and a kernel trace of the
# patched build's 8k prefill, where o's re-layout (to_bf16_mma_order_kernel, 131,072 blocks,
# 15 ms of an 8k prefill on the H100 in session 59) and the rope launch on o should be gone.
# With dsv4_nrq beside them (the patched build plus session60_norm_rope_quant_prefill.patch:
# norm_rope_quant's one launch for vectors of a one-warp block at any count, i.e. the indexer's
# queries at prefill in one pass instead of rope, Hadamard and FP4 rounding apart).
# Output: session60_attention_projection_step_h100.txt, ..._trace_prefill8k_h100.txt.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== ab_step prefill 8192 + decode b=1,16" >> $O
timeout 400 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 ./dsv4_nrq -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1,16 >> $O 2>&1
echo "== trace prefill 8192 + decode b=1 (the patched build)" >> $O
DSV4_TRACE_OUT=/tmp/pf.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 100 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 >> $O 2>&1
python3 trace_summary.py /tmp/pf.csv --eager --by-grid --top 60 > $OUT/trace_prefill.txt 2>&1
echo "== done" >> $O
