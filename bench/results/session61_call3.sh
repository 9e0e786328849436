# Session 61, call 3: where call 2's attention time went (its 8k prefill moved -0.1 to -0.4%: the
# ~41 ms of passes removed came back in the attention kernels, HCA's launches +42%): kernel
# traces of an 8k prefill for main (dsv4_base), both fusions (dsv4), the output projection alone
# (dsv4_vproj: Ops::fuses_attention_query_prologue false) and the queries' prologue alone
# (dsv4_vprol: the projection not fused), the attention kernels' rows side by side, and
# bench_sparse_attention's prefill launches with each fusion alone and both (the patched build's).
# Prepared, not run (the session's device time was spent). Builds: main with
# session61_attention_fusions.patch applied (dsv4), then with CudaOps::fuses_attention_query_prologue
# returning false (dsv4_vproj), then with cuda_attention.cpp's `fused` (the projection) false
# (dsv4_vprol); main itself as dsv4_base. `scripts/gpu_bundle.sh build --with dsv4_base=...
# --with dsv4_vproj=... --with dsv4_vprol=...`. Output: session61_call3_h100.txt (or _h200).
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
for b in dsv4_base dsv4 dsv4_vproj dsv4_vprol; do
  echo "== trace prefill 8192: $b" >> $O
  DSV4_TRACE_OUT=/tmp/$b.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 70 ./$b bench step \
    --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 2>&1 | grep -E "^prefill|^decode" >> $O
  python3 trace_summary.py /tmp/$b.csv --eager --by-grid --top 80 > $OUT/trace_$b.txt 2>&1
  grep -E "sparse_attn|rms_norm_warp|rope_kernel|to_bf16_mma_order|norm_rope" $OUT/trace_$b.txt >> $O
done
echo "== bench_sparse_attention 10 prefill (each fusion's cost a launch)" >> $O
timeout 120 ./bench_sparse_attention 10 prefill >> $O 2>&1
echo "== done" >> $O
