# Session 61, call 2 of 2 (same machine as session61_tests.sh): the step against main
# (dsv4_base), the projection alone (dsv4_proj) and with the queries' prologue (dsv4), and a
# kernel trace of the last's 8k prefill, where o's re-layout (to_bf16_mma_order_kernel, 131,072
# blocks), the rope launches on q and o and the per-head q norm (rms_norm_warp_kernel, 65,536
# blocks) should be gone.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== ab_step prefill 8192 + decode b=1,16" >> $O
timeout 420 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4_proj ./dsv4 -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1,16 >> $O 2>&1
echo "== trace prefill 8192 + decode b=1 (projection and prologue)" >> $O
DSV4_TRACE_OUT=/tmp/pf.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 100 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 >> $O 2>&1
python3 trace_summary.py /tmp/pf.csv --eager --by-grid --top 60 > $OUT/trace_prefill.txt 2>&1
echo "== done" >> $O
