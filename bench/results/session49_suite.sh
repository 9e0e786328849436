# Session 49's second last device call (output: session49_suite_h100.txt): every GPU test on the
# session's final build (scripts/gpu_run.sh without sanitizers or benchmarks). Carry
# [".dev/gpu.tar.xz"]; timeout 540 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== all GPU tests" >> $O
GPU_SANITIZE=0 GPU_BENCH=0 OUT=/tmp/suite timeout 540 bash gpu_run.sh > /tmp/suite.txt 2>&1; echo "gpu_run rc=$?" >> $O
grep -E "^==|FAILED|skipped|PASSED|cosine|rc=" /tmp/suite.txt | head -60 >> $O
echo "== done" >> $O
