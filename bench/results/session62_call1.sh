# Session 62, call 1: session 61's prepared diagnostic (its call 3) with main's build as
# dsv4: kernel traces of an 8k prefill for main (dsv4), both fusions of session61_attention_fusions.patch
# (dsv4_fus), the output projection alone (dsv4_vproj: CudaOps::fuses_attention_query_prologue false)
# and the queries' prologue alone (dsv4_vprol: cuda_attention.cpp's `fused` false), their attention
# rows side by side; bench_sparse_attention of the patched build (each fusion's cost a launch); then
# an A/B of session60_norm_rope_quant_prefill.patch (dsv4_nrq) against main on the 8k prefill.
# Bundle: `scripts/gpu_bundle.sh build --with dsv4_fus=... --with dsv4_vproj=... --with dsv4_vprol=...
# --with dsv4_nrq=... --with bench_sparse_attention_fus=...`. Output: session62_call1_<gpu>.txt.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
for b in dsv4 dsv4_fus dsv4_vproj dsv4_vprol; do
  echo "== trace prefill 8192: $b" >> $O
  DSV4_TRACE_OUT=/tmp/$b.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 70 ./$b bench step \
    --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 2>&1 | grep -E "^prefill|^decode" >> $O
  python3 trace_summary.py /tmp/$b.csv --eager --by-grid --top 80 > $OUT/trace_$b.txt 2>&1
  grep -E "sparse_attn|rms_norm_warp|rope_kernel|to_bf16_mma_order|norm_rope" $OUT/trace_$b.txt >> $O
done
echo "== bench_sparse_attention 10 prefill (the fusions' build: each fusion's cost a launch)" >> $O
timeout 120 ./bench_sparse_attention_fus 10 prefill >> $O 2>&1
echo "== ab_step prefill 8192: main against the norm_rope_quant patch" >> $O
timeout 200 bash ab_step.sh --rounds 2 ./dsv4 ./dsv4_nrq -- --device cuda --model flash --context 8192 \
  --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== done" >> $O
