# Prepared in session 53, not run (no device time left): which part of session53_one_arrival.patch
# (1.4% slower than the landed gate_route_plan at batch 1, docs/PERF.md session 53) costs, each
# part alone against main, and a batch-1 trace of main's graph step (the landed kernel's chain in
# order). Parts: session53_route_lanes8.patch (the route's selection scanning 8 experts a lane
# where E <= 256, moe_route_kernel too) and session53_route_one_level.patch (up to two tokens the
# last block of all finishes every logit; its 32 sums a thread at once; 32 at once alone spills 8
# bytes in the two-level form, so it is not a part of its own).
# Before: main's dsv4 copied to /tmp/dsv4_main; each patch applied alone, built, its dsv4 copied
# to /tmp/dsv4_lanes8 and /tmp/dsv4_one_level, the patch reverted; `scripts/gpu_bundle.sh build
# --with dsv4_lanes8=/tmp/dsv4_lanes8 --with dsv4_one_level=/tmp/dsv4_one_level`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== ab_step main / lanes8 / one_level" >> $O
timeout 200 bash ab_step.sh --rounds 3 --out /tmp/ab ./dsv4 ./dsv4_lanes8 ./dsv4_one_level -- --device cuda \
  --model flash --context 8192 --batch 1,16 >> $O 2>&1; echo "rc=$?" >> $O
echo "== trace decode b=1 (main)" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./dsv4 bench step \
  --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 >> $O 2>&1; echo "rc=$?" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 60 > $OUT/trace_b1_bygrid.txt 2>&1
python3 trace_summary.py /tmp/b1.csv --sequence 200 > $OUT/trace_b1_sequence.txt 2>&1
echo "== done" >> $O
