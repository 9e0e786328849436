// A test-only reference of the chained order (kernels::Fp8MmaKernel::kChainedBf16Wgmma) on
// mma.sync instead of WGMMA: whether the decode kernels, which run on mma.sync, can give the
// chained WGMMA kernels' bits.
#pragma once

#include <cstdint>

namespace dsv4::testing {

// y[r, c] (fp32, m x n) = the chained order's sum over K of x16[r, :] . w16[c, :]: x16 (m x k) and
// w16 (n x k) bf16 in the chained kernels' K order (e4m3_to_f16_mma_order's), k a multiple of 128.
// Each of the four K lanes j is one mma.sync m16n8k16 accumulation from zero over the K blocks
// b = j (mod 4), eight k16 steps a block in K order; y = ((lane 0 + lane 1) + lane 2) + lane 3.
// One warp a 16-column x 8-row tile of y; the call waits for the device.
void chained_mma_sync_reference(const uint16_t* x16, const uint16_t* w16, float* y, int64_t m, int64_t n, int64_t k);

}  // namespace dsv4::testing
