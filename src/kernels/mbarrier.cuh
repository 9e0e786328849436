// Shared-memory barriers (mbarrier) through which a kernel's producer threads hand copied tiles to
// its consumers and the consumers hand the emptied buffers back: f16_wgmma_gemm's TMA-fed GEMMs and
// sparse_attn_wgmma_ws's sparse attention.
#pragma once

#include <cstdint>

namespace dsv4::kernels {

// Sets the barrier at `bar` (a shared-memory address) to complete a phase on `count` arrivals.
__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// The CTA's thread 0 sets `stages` pairs of barriers up, the full ones from `full0` and the empty
// ones from `empty0` (8 bytes apart each), to complete on `full_arrivals` and `empty_arrivals`,
// and makes them visible to the async proxy; every thread of the CTA calls it, and meets the
// others at __syncthreads after.
__device__ __forceinline__ void init_stage_barriers(uint32_t full0, uint32_t empty0, int stages, uint32_t full_arrivals,
                                                    uint32_t empty_arrivals) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      barrier_init(full0 + 8 * i, full_arrivals);
      barrier_init(empty0 + 8 * i, empty_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}

// One arrival that also announces `bytes` of copies that will complete on the barrier.
__device__ __forceinline__ void barrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// One arrival, releasing this thread's earlier writes to the threads that wait for the phase.
__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace dsv4::kernels
