# Session 58's device call (output: session58_decode_h100.txt or _h200.txt). Session 57's call showed
# that session 55's two patches (x quantised in the GEMMs, the L2 prefetch) lose and measured the
# top-k and both cluster kernels only beside them; this call measures the three without them:
# bench_indexer (the top-k on each cluster size, to choose where clusters start) against main's,
# an A/B of decode steps at batch 1 and 16 of main (dsv4_base), the top-k (dsv4_t), with hc_pre's
# cluster form (dsv4_hc) and with gate_route_plan's (dsv4), and a trace of each at batch 1.
# Before, from main: build, keep dsv4 as /tmp/s55/dsv4_base and bench_indexer as
# /tmp/s55/bench_indexer_base; apply bench/results/session56_topk.patch, build, keep dsv4 as
# /tmp/s58/dsv4_t; apply session57_hc_pre_cluster.patch, build, keep dsv4 as /tmp/s58/dsv4_hc; apply
# session57_gate_route_cluster.patch, build; `scripts/gpu_bundle.sh build --with
# dsv4_base=/tmp/s55/dsv4_base --with dsv4_t=/tmp/s58/dsv4_t --with dsv4_hc=/tmp/s58/dsv4_hc --with
# bench_indexer_base=/tmp/s55/bench_indexer_base`; carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bench_indexer" >> $O
for v in _base ""; do echo "-- bench_indexer$v" >> $O; timeout 60 ./bench_indexer$v 5 >> $O 2>&1; done
echo "== ab_step base / top-k (new1) / + hc_pre's cluster (new2) / + gate_route_plan's (new3)" >> $O
timeout 400 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4_base ./dsv4_t ./dsv4_hc ./dsv4 -- \
  --device cuda --model flash --context 8192 --batch 1,16 2>&1 | grep -v "^ab_step: round" >> $O
echo "rc=$?" >> $O
for b in dsv4_base dsv4_t dsv4_hc dsv4; do
  echo "== trace batch 1, $b" >> $O
  DSV4_TRACE_OUT=/tmp/$b.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 60 ./$b bench step \
    --device cuda --model flash --context 8192 --batch 1 --repeats 1 --iters 4 2>&1 | grep -E "^decode" >> $O
  python3 trace_summary.py /tmp/$b.csv --by-grid --top 30 >> $O 2>&1
done
echo "== done" >> $O
