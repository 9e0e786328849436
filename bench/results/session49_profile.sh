# Prepared in session 48 for the next session's first device call (not run yet): where an 8k
# prefill and a batch-1 step go after session 48 (kernel traces by grid), and ncu's stall samples
# by SASS region (scripts/ncu_sass_regions.py) of the three prefill kernels next in line after the
# e2m1 GEMM (docs/PERF.md session 48): one CSA sparse attention prefill launch (its splits'
# partials), the indexer's score kernel at bench_indexer's 8k prefill (its 57th launch: 8 a case,
# six decode cases and the 2k prefill before it; 24% occupancy), and one hc_mix_scan launch of an
# 8k prefill. Before: `ninja -C build && scripts/gpu_bundle.sh build`. Carry [".dev/gpu.tar.xz"];
# timeouts sum to 500 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== trace: one 8k prefill (eager kernels by grid)" >> $O
DSV4_TRACE_OUT=/tmp/prefill8k.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 90 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/p.txt 2>&1
echo "rc=$?" >> $O
python3 trace_summary.py --eager --by-grid --top 40 /tmp/prefill8k.csv >> $O 2>&1
echo "== trace: a batch-1 step (the graph's kernels by grid)" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 80 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 > /tmp/b.txt 2>&1
echo "rc=$?" >> $O
python3 trace_summary.py --by-grid --top 30 /tmp/b1.csv >> $O 2>&1
# ncu of one launch of `kernel` (a regex) in `command`, skipping `skip` launches: its headline
# figures and stall samples by SASS region.
profile() {
  local name=$1 kernel=$2 skip=$3; shift 3
  echo "== ncu: $name" >> $O
  timeout 100 ncu --clock-control none -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section Occupancy --section SourceCounters -f -o "/tmp/$name" "$@" > /tmp/ncu.txt 2>&1
  ncu -i "/tmp/$name.ncu-rep" --page details 2>&1 | grep -E "Duration|Throughput|Issued|Achieved Occ|Block Limit" \
    | head -14 >> $O
  ncu -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass > "/tmp/$name.csv" 2>/dev/null && \
    timeout 25 python3 ncu_sass_regions.py "/tmp/$name.csv" --top 14 >> $O 2>&1
}
profile attention sparse_attn_wgmma 1 ./bench_sparse_attention 1 "csa prefill"
profile indexer mma_score_kernel 56 ./bench_indexer 1
profile mix_scan hc_mix_scan 20 ./dsv4 bench step --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 1
echo "== done" >> $O
