# Session 49's third device call (output: session49_mhc2_h100.txt): the mHC prefill kernels after
# call 2 (session49_mhc.sh) measured them slower: the mix scan's loads unconditional (ptxas had
# issued each predicated load just before its conversion, one round trip at a time) in batches of
# 4 rows of 4 (94 registers: four blocks an SM), its shared layout back as it was; the post mix's 8
# columns a thread from 256 tokens on (decode keeps 4); hc_pre_finish's slices 2,048 wide (every
# thread 8 columns). Against main 1200cbd: the mHC bit tests and sanitizers, ncu of the three
# kernels' first launches in an 8k prefill with both binaries, the whole model A/B, and the new
# scan's SASS. Before: `ninja -C build && scripts/gpu_bundle.sh build`; main's dsv4 as dsv4_base
# in .dev/base.tar.xz. Carry [".dev/gpu.tar.xz", ".dev/base.tar.xz"]; timeouts sum to 560 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/base.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
export OPENBLAS_CORETYPE=Haswell  # the CPU reference's kernel family, as scripts/gpu_run.sh pins it
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
echo "== bit tests: mHC" >> $O
timeout 60 ./test_ops_cuda --gtest_filter='*Mhc*:*RmsNorm*' > /tmp/bits.txt 2>&1; echo "rc=$?" >> $O
grep -E "FAILED|Failure|PASSED|tests from.*ran|differs" /tmp/bits.txt | head -24 >> $O
for bin in dsv4_base dsv4; do
  echo "== ncu: the mHC kernels' first launches, $bin" >> $O
  timeout 50 ncu --clock-control none -k "regex:hc_mix_scan|hc_pre_finish|hc_post_mix" --launch-count 3 \
    --section SpeedOfLight --section Occupancy -f -o /tmp/mhc_$bin ./$bin bench step --device cuda --model flash \
    --context 8192 --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/ncu.txt 2>&1
  ncu -i /tmp/mhc_$bin.ncu-rep --page details 2>&1 | grep -E "  [a-z_].*\(|Duration|DRAM Throughput|Achieved Occ" >> $O
done
echo "== ab default" >> $O
timeout 140 bash ab_step.sh --rounds 2 ./dsv4_base ./dsv4 -- --device cuda --model flash --context 8192 --prefill-lengths 2048,8192 --batch 1 >> $O 2>&1
for tool in memcheck synccheck racecheck; do
  echo "== $tool" >> $O
  timeout 60 compute-sanitizer --tool $tool --print-limit 4 --error-exitcode 1 ./test_ops_cuda --gtest_filter='*Mhc*' 2>&1 \
    | grep -v "Host Frame" | grep -E "=====|FAILED|PASSED" | head -10 >> $O; echo "rc=${PIPESTATUS[0]}" >> $O
done
echo "== ncu: the new mix scan's SASS with its stall samples (mix_scan_sass.csv)" >> $O
timeout 60 ncu --clock-control none -k regex:hc_mix_scan --launch-count 1 --section SourceCounters --section WarpStateStats \
  -f -o /tmp/scan_src ./dsv4 bench step --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 \
  --repeats 1 --iters 1 > /tmp/ncu.txt 2>&1
ncu -i /tmp/scan_src.ncu-rep --page source --csv --print-source sass > $OUT/mix_scan_sass.csv 2>/dev/null
timeout 25 python3 ncu_sass_regions.py $OUT/mix_scan_sass.csv --top 8 >> $O 2>&1
echo "== done" >> $O
