# Session 58's third device call (output: session58_long_h100.txt or _h200.txt): the landed top-k
# (main, dsv4) against main before it (dsv4_base) where rows are long: decode steps at 32k and 64k
# contexts (8,192 and 16,384 compressed keys a CSA row), batches 1 and 16, and a 32k prefill.
# Before: build main before the top-k (ff68cfd) and keep dsv4 as /tmp/s55/dsv4_base; build main;
# `scripts/gpu_bundle.sh build --with dsv4_base=/tmp/s55/dsv4_base`; carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
for ctx in 32768 65536; do
  echo "== ab_step base / landed top-k, context $ctx" >> $O
  timeout 250 bash ab_step.sh --rounds 2 --out /tmp/ab$ctx ./dsv4_base ./dsv4 -- \
    --device cuda --model flash --context $ctx --batch 1,16 2>&1 | grep -v "^ab_step: round" >> $O
done
echo "== trace batch 1, context 65536" >> $O
DSV4_TRACE_OUT=/tmp/b1.csv CUDA_INJECTION64_PATH=$G/libdsv4_kernel_trace.so timeout 90 ./dsv4 bench step \
  --device cuda --model flash --context 65536 --batch 1 --repeats 1 --iters 4 2>&1 | grep -E "^decode" >> $O
python3 trace_summary.py /tmp/b1.csv --by-grid --top 30 >> $O 2>&1
echo "== done" >> $O
