// Scratch a kernel writes and reads back once (sparse attention's split partials): a discard of
// its L2 lines once read, so that lines still in L2 are dropped rather than written to DRAM.
#pragma once

namespace dsv4::kernels {

// Drops the 128-byte L2 line at `line` (128-byte aligned global memory) without writing it back:
// its contents become undefined. Every read of it, by any thread, must be complete first.
__device__ __forceinline__ void discard_l2_line(const void* line) {
  asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(line) : "memory");
}

}  // namespace dsv4::kernels
