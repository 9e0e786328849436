# Session 54's third device call, prepared and not run (the session's device time ran out; output
# would be session54_profile_h100.txt or _h200.txt): hc_post inside
# hc_pre again, in the form that keeps its loads in flight (session54_hc_post_in_pre_v2.patch:
# the chunk's stream found once, the previous streams read through the read-only path so that the
# stores do not hold the next loads back): its op test under memcheck and a batch-1 A/B against
# main. Cut to the device time left (no ncu).
# Before: the patch applied, built, its dsv4 and test_ops_cuda copied to /tmp/dsv4_hc2 and
# /tmp/test_ops_cuda_hc2, the patch reverted and main built; `scripts/gpu_bundle.sh build --with
# dsv4_hc2=/tmp/dsv4_hc2 --with test_ops_cuda_hc2=/tmp/test_ops_cuda_hc2`. Carry [".dev/gpu.tar.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
export LD_LIBRARY_PATH=$G/lib OPENBLAS_CORETYPE=Haswell; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
set -f
timeout 60 ./test_ops_cuda_hc2 --gtest_filter='*CudaOpsMhc*' 2>&1 | grep -E "OK|FAILED|Failure|PASSED" | tail -10 >> $O
for tool in memcheck; do
  timeout 60 compute-sanitizer --tool $tool ./test_ops_cuda_hc2 --gtest_filter='*WithThePostMix*' 2>&1 | \
    grep -E "ERROR SUMMARY|PASSED|FAILED|Error" | head -4 | sed "s/^/$tool: /" >> $O
done
set +f
echo "== ab_step main / hc_post inside hc_pre (v2), batch 1" >> $O
timeout 120 bash ab_step.sh --rounds 2 --out /tmp/ab ./dsv4 ./dsv4_hc2 -- --device cuda --model flash --context 8192 \
  --batch 1 >> $O 2>&1; echo "rc=$?" >> $O
echo "== done" >> $O
