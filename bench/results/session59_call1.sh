# Session 59 call 1: where an 8k prefill goes now (kernel trace), sparse attention's prefill
# launches (bench + ncu by SASS region), and prefix caching with the scheduler's wait on the GPU.
# Output: session59_call1_h100.txt, session59_trace_prefill8k_h100.txt,
# session59_ncu_sparse_attn_wgmma_h100.txt. Before: main (46a091e), `scripts/gpu_bundle.sh build`.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== trace prefill 8192" >> $O
DSV4_TRACE_OUT=/tmp/pf.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 120 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 >> $O 2>&1
python3 trace_summary.py /tmp/pf.csv --eager --by-grid --top 60 > $OUT/trace_prefill.txt 2>&1
echo "== bench_sparse_attention prefill" >> $O
timeout 120 ./bench_sparse_attention 10 prefill >> $O 2>&1
echo "== ncu csa prefill" >> $O
timeout 240 ncu -k regex:sparse_attn_wgmma --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section SourceCounters --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  -o /tmp/sa ./bench_sparse_attention 1 "csa prefill" > /tmp/ncu.log 2>&1
tail -3 /tmp/ncu.log >> $O
ncu -i /tmp/sa.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu -i /tmp/sa.ncu-rep --page source --csv --print-source sass > /tmp/sa.csv 2>/dev/null
python3 ncu_sass_regions.py /tmp/sa.csv --top 40 > $OUT/ncu_regions.txt 2>&1
echo "== prefix 4096 shared + 64 own, caching on (scheduler waits for shared prefixes)" >> $O
timeout 150 ./dsv4 bench throughput --model flash --load-format dummy --dummy-share-layers --device cuda \
  --num-prompts 16 --prefix-len 4096 --input-len 64 --output-len 32 --max-model-len 8192 --max-num-seqs 16 \
  --enable-prefix-caching >> $O 2>&1
echo "rc=$?" >> $O
echo "== done" >> $O
