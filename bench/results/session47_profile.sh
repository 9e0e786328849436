# Session 47's first device call (prepared in session 46; output: session47_profile_h100.txt): where
# an 8k prefill and a batch-1 step go after session 46's epilogue work, by kernel family, and ncu of
# the routed experts' grouped kernel (the largest family) to choose the next change. Before: `ninja
# -C build && scripts/gpu_bundle.sh build` (-> .dev/gpu.tar.xz). Run: the device tool with carry
# [".dev/gpu.tar.xz"] and `bash bench/results/session47_profile.sh`; timeouts sum to 330 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== trace: one 8k prefill (eager kernels by family)" >> $O
DSV4_TRACE_OUT=/tmp/prefill8k.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 120 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/p.txt 2>&1
echo "rc=$?" >> $O
python3 trace_summary.py --eager --top 30 /tmp/prefill8k.csv >> $O 2>&1
echo "== trace: a batch-1 step (the graph's kernels by grid)" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 90 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 > /tmp/b.txt 2>&1
echo "rc=$?" >> $O
python3 trace_summary.py --by-grid --top 30 /tmp/b1.csv >> $O 2>&1
echo "== ncu: the grouped e2m1 kernel at 8,192 tokens (gate)" >> $O
timeout 110 ncu --clock-control none -k regex:f16_wgmma_e2m1 --launch-skip 2 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section SourceCounters -f -o /tmp/e2m1 ./bench_routed_experts 2 8192 > /tmp/ncu.txt 2>&1
ncu -i /tmp/e2m1.ncu-rep --page details 2>&1 | grep -E "Duration|Throughput|Issued|Eligible" | head -10 >> $O
ncu -i /tmp/e2m1.ncu-rep --page source --csv --print-source sass > /tmp/e2m1_src.csv 2>/dev/null && \
  python3 ncu_sass_regions.py /tmp/e2m1_src.csv --top 12 >> $O 2>&1
echo "== done" >> $O
