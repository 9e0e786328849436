# Session 58's sixth device call (output: session58_prefix_h100.txt or _h200.txt): prefix caching
# measured on the GPU at V4-Flash geometry (dummy weights, layers of a kind sharing them): 16
# requests whose prompts share a 4,096-token prefix and have INPUT_LEN (default 256) tokens of their own, submitted at
# once, 32 tokens out each, greedy, with and without prefix caching (and with a snapshot interval).
# Before: build main;
# `scripts/gpu_bundle.sh build`; carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
# CACHING lists the runs' prefix caching flags (default: on, off); INTERVAL adds
# --prefix-snapshot-interval to the runs with caching on.
for caching in ${CACHING:---enable-prefix-caching --no-enable-prefix-caching}; do
  [ "$caching" = --enable-prefix-caching ] && [ -n "$INTERVAL" ] && caching="$caching --prefix-snapshot-interval $INTERVAL"
  echo "== bench throughput --input-len ${INPUT_LEN:-256} $caching" >> $O
  timeout 150 ./dsv4 bench throughput --model flash --load-format dummy --dummy-share-layers --device cuda \
    --num-prompts 16 --prefix-len 4096 --input-len ${INPUT_LEN:-256} --output-len 32 --max-model-len 8192 --max-num-seqs 16 \
    $caching >> $O 2>&1
  echo "rc=$?" >> $O
done
echo "== done" >> $O
