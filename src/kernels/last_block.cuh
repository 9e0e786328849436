// The last-block pattern of kernels whose blocks each write a share of a result that one block
// then finishes (mHC's mix partials, sparse attention's split partials): every block counts
// itself in once its share is written, and the block that arrives last reads all the shares.
#pragma once

namespace dsv4::kernels {

// Called by every thread of a block after its share is stored: true, in every thread, for the
// block that brings `count` to `blocks` (the count's other increments are the other blocks'). The
// count is one atomic by thread 0 with release and acquire semantics at GPU scope, after the
// block's barrier: the block's stores are visible to whichever block counts after it, and the last
// block sees every block's, as the fence.sc pair (__threadfence() in every thread before the count
// and again after it) of the usual pattern gives, with one ordered atomic instead.
__device__ __forceinline__ bool last_block_to_arrive(unsigned* count, unsigned blocks) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(before) : "l"(count) : "memory");
    last = before == blocks - 1;
  }
  __syncthreads();
  return last;
}

}  // namespace dsv4::kernels
