# Session 49's second device call (output: session49_mhc_*.txt): three mHC prefill kernels against
# main 1200cbd in one call: the mix scan's tiles loaded 8 rows a warp at a time (all their loads in
# flight) and laid out for three shared loads a position instead of seven, the post mix's 16-byte
# accesses (8 columns a thread), and hc_pre_finish's Sinkhorn on slice 0's spare warp (no block of
# its own). The mHC tests (bits), the sanitizers on them, the whole model A/B, nsys's count of the
# GPU's idle time in an 8k prefill (scripts/gpu_idle.py), ncu's headline figures of the prefill
# kernels next in line (the per-head q norm, x's re-layouts, the three mHC kernels) and the new
# mix scan's SASS with its stall samples. Before: `ninja -C build && scripts/gpu_bundle.sh build`,
# main's dsv4 (a worktree build) stripped as dsv4_base into .dev/base.tar.xz. Carry
# [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 800 s (the call's limit, 600 s, cuts the
# last if the others run long).
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: mHC" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*Mhc*:*RmsNorm*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|differs" /tmp/bits.txt | head -24 >> $O
echo "== ab default" >> $O
timeout 140 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
for tool in memcheck synccheck racecheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter='*Mhc*' 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== nsys: the GPU's idle time in an 8k prefill (untraced kernels)" >> $O
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  timeout 90 $NSYS profile --trace=cuda --sample=none --cpuctxsw=none -f true -o /tmp/prefill ./dsv4 bench step --device cuda \
    --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/nsys.txt 2>&1; echo "rc=$?" >> $O
  timeout 60 $NSYS export --type sqlite -f true -o /tmp/prefill.sqlite /tmp/prefill.nsys-rep > /dev/null 2>&1
  timeout 30 python3 gpu_idle.py /tmp/prefill.sqlite >> $O 2>&1
else
  echo "no nsys" >> $O
fi
# ncu's headline figures of `count` launches of `kernel` (a regex) in an 8k prefill, from launch `skip` on.
headline() {
  local name=$1 kernel=$2 skip=$3 count=$4
  echo "== ncu: $name" >> $O
  timeout 45 ncu --clock-control none -k "regex:$kernel" --launch-skip "$skip" --launch-count "$count" \
    --section SpeedOfLight --section LaunchStats --section Occupancy -f -o "/tmp/$name" ./dsv4 bench step --device cuda \
    --model flash --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/ncu.txt 2>&1
  ncu -i "/tmp/$name.ncu-rep" --page details 2>&1 | grep -E "  [a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|Grid Size|Registers Per|Achieved Occ" \
    | head -$((7 * count + 2)) >> $O
}
headline q_norm rms_norm_warp_kernel 0 2
headline relayouts to_bf16_mma_order_kernel 0 6
headline mix_scan hc_mix_scan 0 1
headline pre_finish hc_pre_finish 0 1
headline post_mix hc_post_mix 0 1
echo "== ncu: the new mix scan's SASS with its stall samples (mix_scan_sass.csv)" >> $O
timeout 60 ncu --clock-control none -k regex:hc_mix_scan --launch-count 1 --section SourceCounters --section WarpStateStats \
  -f -o /tmp/scan_src ./dsv4 bench step --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 \
  --repeats 1 --iters 1 > /tmp/ncu.txt 2>&1
ncu -i /tmp/scan_src.ncu-rep --page source --csv --print-source sass > $OUT/mix_scan_sass.csv 2>/dev/null
timeout 25 python3 ncu_sass_regions.py $OUT/mix_scan_sass.csv --top 14 >> $O 2>&1
echo "== done" >> $O
