# Session 49's fifth device call (output: session49_scan_full_h100.txt): hc_mix_scan with no test
# against the chunk's length where every chunk is whole (V4's rows; dsv4_full: 105 registers, three
# blocks an SM; four spilled) against main b14da53 (dsv4_head: 95 registers, four blocks). ncu of
# the scan's first launch of an 8k prefill twice with each, then the model's 8k prefill A/B. Carry
# [".dev/gpu.tar.xz", ".dev/scan.tar.xz"] (the binaries built here); timeouts sum to 340 s.
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp; tar xJf .dev/scan.tar.xz -C $G
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
for bin in dsv4_head dsv4_full dsv4_head dsv4_full; do
  echo "== ncu: the mix scan's first launch, $bin" >> $O
  timeout 45 ncu --clock-control none -k "regex:hc_mix_scan" --launch-count 1 --section SpeedOfLight --section Occupancy \
    --section InstructionStats -f -o /tmp/scan_$bin ./$bin bench step --device cuda --model flash --context 8192 \
    --prefill-lengths 8192 --batch 1 --repeats 1 --iters 1 > /tmp/ncu.txt 2>&1
  ncu -i /tmp/scan_$bin.ncu-rep --page details 2>&1 | grep -E "Duration|Executed Instructions  |Achieved Occ|Theoretical Occ" >> $O
done
echo "== ab default" >> $O
timeout 160 bash ab_step.sh --rounds 2 ./dsv4_head ./dsv4_full -- --device cuda --model flash --context 8192 --prefill-lengths 8192 --batch 1 >> $O 2>&1
echo "== done" >> $O
