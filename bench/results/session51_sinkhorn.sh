# Prepared in session 51, not run (no device machine started): how much of a decode
# step hc_pre_fused's Sinkhorn holds (its finishing block's longer chain): main against a
# timing-only build whose Sinkhorn runs one iteration instead of 20 (wrong comb, right timing
# otherwise), alternating. Before: `ninja -C build && scripts/gpu_bundle.sh build`; the variant:
# warp_sinkhorn<4>(c0, 4, 1, ...) in post_and_comb, built, stripped, xz'd to
# .dev/variants/dsv4_sink1.xz. Carry [".dev/gpu.tar.xz", ".dev/variants/dsv4_sink1.xz"].
G=/tmp/gpu; rm -rf $G; tar xJf .dev/gpu.tar.xz -C /tmp
xz -dc .dev/variants/dsv4_sink1.xz > $G/dsv4_sink1; chmod +x $G/dsv4_sink1
export LD_LIBRARY_PATH=$G/lib; mkdir -p $OUT; cd $G
O=$OUT/out.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $O
timeout 420 bash ab_step.sh --rounds 2 ./dsv4 ./dsv4_sink1 -- --device cuda --model flash --context 8192 \
  --batch 1,16 --prefill-lengths 2048 >> $O 2>&1; echo "rc=$?" >> $O
