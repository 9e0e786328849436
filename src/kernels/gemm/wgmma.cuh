// Hopper's warpgroup MMA (WGMMA) pieces shared by the kernels that use it (fp8_mma_gemm's FP8
// kernel, f16_wgmma_gemm, sparse_attn_wgmma and sparse_attn_wgmma_ws): shared-memory matrix
// descriptors of 128-byte-swizzled K-major and MN-major tiles, the fences and waits around the
// asynchronous MMAs, the MMAs they issue, and adding a K block's sums into the running lane sums.
//
// Accumulator layout (PTX ISA, wgmma D for m64nN): warp w of the warpgroup holds rows 16 w ..
// 16 w + 15; lane (g, t) holds, for each n8 slice j, d[4j] = (row g, column 8j + 2t), d[4j + 1] =
// (g, 8j + 2t + 1), d[4j + 2] = (g + 8, 8j + 2t), d[4j + 3] = (g + 8, 8j + 2t + 1).
#pragma once

#include <cstdint>
#include <utility>

namespace dsv4::kernels {

constexpr int kWgmmaN128Accumulators = 64;  // 128 columns / 8 x 4 per lane

// A shared-memory matrix descriptor of a K-major operand in 128-byte-swizzled rows (chunk c of
// row r at chunk c ^ (r % 8), the tile starting on a 1024-byte boundary): the start address, no
// leading-dimension offset (one swizzle atom spans the instruction's K), 1024 bytes between groups
// of 8 rows, layout "128B swizzle". Adding i to the descriptor moves its start 16 i bytes along K.
__device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t smem_address) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_address & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>(1) << 16;
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;
  return desc;
}

// The same for an MN-major operand in 128-byte-swizzled rows (rows along K, each 128 bytes of 64
// consecutive 16-bit MN elements, chunk c of row r at chunk c ^ (r % 8), atoms of 8 rows on
// 1024-byte boundaries): `atom_stride` bytes between the 64-element atoms along MN (the leading
// dimension offset), 1024 bytes between groups of 8 rows along K.
__device__ __forceinline__ uint64_t wgmma_descriptor_mn_major(uint32_t smem_address, uint32_t atom_stride) {
  return (wgmma_descriptor(smem_address) & ~(uint64_t{0x3FFF} << 16)) | static_cast<uint64_t>(atom_stride >> 4) << 16;
}

__device__ __forceinline__ void fence_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int N, int... I>
__device__ __forceinline__ void fence_each(float (&d)[N], std::integer_sequence<int, I...>) {
  (fence_register(d[I]), ...);
}

// Pins the accumulator registers at this point of the program: the compiler may not move their
// reads or writes across it (WGMMA writes them asynchronously, outside what it can see). Expanded
// at compile time: a loop of 128 asm statements is not always unrolled, and an array indexed at
// run time lives in local memory.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
  fence_each(d, std::make_integer_sequence<int, N>{});
}

// Orders this thread's generic-proxy shared-memory writes (plain stores, cp.async) before the
// async proxy's reads (WGMMA operands) that follow a barrier.
__device__ __forceinline__ void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most `Pending` of the warpgroup's committed WGMMA groups are still running.
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }

// The accumulators' operands of the MMAs below: 16 registers d[i] .. d[i + 15] ("+f" outputs), and
// the placeholders of 16 operands from %i.
#define DSV4_WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define DSV4_WGMMA_D16(i) DSV4_WGMMA_D4(i), DSV4_WGMMA_D4(i + 4), DSV4_WGMMA_D4(i + 8), DSV4_WGMMA_D4(i + 12)
#define DSV4_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define DSV4_WGMMA_R16 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define DSV4_WGMMA_R32 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define DSV4_WGMMA_R48 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define DSV4_WGMMA_R64 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define DSV4_WGMMA_R80 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define DSV4_WGMMA_R96 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define DSV4_WGMMA_R112 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define DSV4_WGMMA_N128_OUTPUTS DSV4_WGMMA_D16(0), DSV4_WGMMA_D16(16), DSV4_WGMMA_D16(32), DSV4_WGMMA_D16(48)
#define DSV4_WGMMA_N128_REGISTERS "{" DSV4_WGMMA_R0 ", " DSV4_WGMMA_R16 ", " DSV4_WGMMA_R32 ", " DSV4_WGMMA_R48 "}, "

// d (+)= A (64 x 32 e4m3, desc_a) x B (128 x 32 e4m3, desc_b)^T; accumulate = false overwrites d.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[kWgmmaN128Accumulators], uint64_t desc_a,
                                                      uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DSV4_WGMMA_N128_REGISTERS "%64, %65, p, 1, 1;\n}\n"
      : DSV4_WGMMA_N128_OUTPUTS
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0));
}

// A 128-wide K block of e4m3 codes (one 128-byte swizzled row per operand row at desc_a and
// desc_b): its four k32 MMAs into d, the first overwriting it, issued as one group (not waited
// for). kWgmmaFp8's kernels (fp8_mma_gemm.cu's cp.async one, through wgmma_e4m3_block, and
// f16_wgmma_gemm.cu's TMA-fed one, which keeps a block in flight while it adds the last) share it,
// so that their block sums are the same instructions.
__device__ __forceinline__ void wgmma_e4m3_issue(float (&d)[kWgmmaN128Accumulators], uint64_t desc_a, uint64_t desc_b) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)  // 32 codes of K each: the descriptors move 2 x 16 bytes
    wgmma_m64n128k32_e4m3(d, desc_a + 2 * kk, desc_b + 2 * kk, kk > 0);
  wgmma_commit();
}

// wgmma_e4m3_issue, then the wait for its MMAs.
__device__ __forceinline__ void wgmma_e4m3_block(float (&d)[kWgmmaN128Accumulators], uint64_t desc_a, uint64_t desc_b) {
  wgmma_e4m3_issue(d, desc_a, desc_b);
  wgmma_wait_all();
  fence_accumulators(d);
}

// d (+)= A (64 x 16, desc_a) x B (128 x 16, desc_b)^T, both K-major, of fp16 values (kBf16 false)
// or bf16 ones: d += A B where kAccumulate, else d = A B (a K block's first step, so that nothing
// zeroes d before it; scale-d an immediate, which takes no register).
#define DSV4_WGMMA_M64N128K16_SS(type, scale_d)                                                              \
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." type "." type " " DSV4_WGMMA_N128_REGISTERS \
               "%64, %65, " scale_d ", 1, 1, 0, 0;\n"                                                      \
               : DSV4_WGMMA_N128_OUTPUTS                                                                  \
               : "l"(desc_a), "l"(desc_b))
template <bool kBf16, bool kAccumulate = true>
__device__ __forceinline__ void wgmma_m64n128k16_16bit(float (&d)[kWgmmaN128Accumulators], uint64_t desc_a,
                                                       uint64_t desc_b) {
  if constexpr (kBf16 && kAccumulate) DSV4_WGMMA_M64N128K16_SS("bf16", "1");
  else if constexpr (kBf16) DSV4_WGMMA_M64N128K16_SS("bf16", "0");
  else if constexpr (kAccumulate) DSV4_WGMMA_M64N128K16_SS("f16", "1");
  else DSV4_WGMMA_M64N128K16_SS("f16", "0");
}
#undef DSV4_WGMMA_M64N128K16_SS

// d += A (64 x 16, from registers) x B (N x 16, desc_b, K-major)^T of fp16 values (kBf16 false) or
// bf16 ones, for N = 32, 64, 96 or 128: d holds an m64n128 accumulator, of which the MMA reads and
// writes the first N / 2 registers (columns 0 .. N - 1); an output's sum does not depend on N.
// Warp w of the warpgroup gives rows 16 w .. 16 w + 15 of A in mma.sync.m16n8k16's fragment
// layout: lane (g, t) holds a[0] = (row g, columns 2t, 2t + 1), a[1] = (g + 8, 2t..), a[2] = (g,
// 2t + 8..), a[3] = (g + 8, 2t + 8..), low column in the low half. The registers must keep their
// values until a wgmma_wait shows the MMA done.
#define DSV4_WGMMA_A_REGS(n, type, registers, operands, ...)                                            \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." type "." type " " registers operands \
               ", 1, 1, 1, 0;\n"                                                                      \
               : __VA_ARGS__                                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
#define DSV4_WGMMA_A_REGS_TYPED(n, registers, operands, ...)                      \
  if constexpr (kBf16) DSV4_WGMMA_A_REGS(n, "bf16", registers, operands, __VA_ARGS__); \
  else DSV4_WGMMA_A_REGS(n, "f16", registers, operands, __VA_ARGS__)
template <int N, bool kBf16 = false>
__device__ __forceinline__ void wgmma_m64nk16_a_regs(float (&d)[kWgmmaN128Accumulators], const uint32_t (&a)[4],
                                                     uint64_t desc_b) {
  static_assert(N == 32 || N == 64 || N == 96 || N == 128, "wgmma_m64nk16_a_regs: N is 32, 64, 96 or 128");
  if constexpr (N == 32) {
    DSV4_WGMMA_A_REGS_TYPED(32, "{" DSV4_WGMMA_R0 "}, ", "{%16, %17, %18, %19}, %20", DSV4_WGMMA_D16(0));
  } else if constexpr (N == 64) {
    DSV4_WGMMA_A_REGS_TYPED(64, "{" DSV4_WGMMA_R0 ", " DSV4_WGMMA_R16 "}, ", "{%32, %33, %34, %35}, %36",
                            DSV4_WGMMA_D16(0), DSV4_WGMMA_D16(16));
  } else if constexpr (N == 96) {
    DSV4_WGMMA_A_REGS_TYPED(96, "{" DSV4_WGMMA_R0 ", " DSV4_WGMMA_R16 ", " DSV4_WGMMA_R32 "}, ",
                            "{%48, %49, %50, %51}, %52",
                            DSV4_WGMMA_D16(0), DSV4_WGMMA_D16(16), DSV4_WGMMA_D16(32));
  } else {
    DSV4_WGMMA_A_REGS_TYPED(128, DSV4_WGMMA_N128_REGISTERS, "{%64, %65, %66, %67}, %68", DSV4_WGMMA_N128_OUTPUTS);
  }
}
#undef DSV4_WGMMA_A_REGS_TYPED
#undef DSV4_WGMMA_A_REGS

// d += A (64 x 16 bf16, desc_a) x B (32 x 16 bf16, desc_b)^T, both K-major.
__device__ __forceinline__ void wgmma_m64n32k16_bf16(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" DSV4_WGMMA_R0 "}, %16, %17, 1, 1, 1, 0, 0;\n"
               : DSV4_WGMMA_D16(0)
               : "l"(desc_a), "l"(desc_b));
}

// d += A (64 x 16 bf16, desc_a) x B (64 x 16 bf16, desc_b)^T, both K-major.
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" DSV4_WGMMA_R0 ", " DSV4_WGMMA_R16
               "}, %32, %33, 1, 1, 1, 0, 0;\n"
               : DSV4_WGMMA_D16(0), DSV4_WGMMA_D16(16)
               : "l"(desc_a), "l"(desc_b));
}

// d += A (64 x 16 bf16, desc_a, K-major) x B (16 x 256 bf16, desc_b, MN-major: wgmma_descriptor_mn_major).
__device__ __forceinline__ void wgmma_m64n256k16_bf16_mn_b(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" DSV4_WGMMA_R0 ", " DSV4_WGMMA_R16 ", "
               DSV4_WGMMA_R32 ", " DSV4_WGMMA_R48 ", " DSV4_WGMMA_R64 ", " DSV4_WGMMA_R80 ", " DSV4_WGMMA_R96 ", "
               DSV4_WGMMA_R112 "}, %128, %129, 1, 1, 1, 0, 1;\n"
               : DSV4_WGMMA_N128_OUTPUTS, DSV4_WGMMA_D16(64), DSV4_WGMMA_D16(80), DSV4_WGMMA_D16(96),
                 DSV4_WGMMA_D16(112)
               : "l"(desc_a), "l"(desc_b));
}

// d += A (64 x 16 bf16, from registers in wgmma_m64nk16_a_regs' layout) x B (16 x 256 bf16, desc_b,
// MN-major: wgmma_descriptor_mn_major). The registers must keep their values until a wgmma_wait
// shows the MMA done.
__device__ __forceinline__ void wgmma_m64n256k16_bf16_a_regs_mn_b(float (&d)[128], const uint32_t (&a)[4],
                                                                 uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" DSV4_WGMMA_R0 ", " DSV4_WGMMA_R16 ", "
               DSV4_WGMMA_R32 ", " DSV4_WGMMA_R48 ", " DSV4_WGMMA_R64 ", " DSV4_WGMMA_R80 ", " DSV4_WGMMA_R96 ", "
               DSV4_WGMMA_R112 "}, {%128, %129, %130, %131}, %132, 1, 1, 1, 1;\n"
               : DSV4_WGMMA_N128_OUTPUTS, DSV4_WGMMA_D16(64), DSV4_WGMMA_D16(80), DSV4_WGMMA_D16(96),
                 DSV4_WGMMA_D16(112)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// Adds a K block's sums blk (an m64n128 accumulator: columns are x rows) into the lane sums q of
// fp8_mma_gemm.h's summation order: q = fmaf(blk, f, q), f the factor of blk's column, which
// factor_pair(j) gives for columns 8 j + 2 t and 8 j + 2 t + 1 (t the lane's lane % 4). Only
// columns below `columns` (a multiple of 32: an MMA of that N) are added.
template <class FactorPair>
__device__ __forceinline__ void add_block_times(float (&q)[kWgmmaN128Accumulators],
                                                const float (&blk)[kWgmmaN128Accumulators], FactorPair&& factor_pair,
                                                int columns = 128) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    if (8 * j >= columns) break;
    const float2 f = factor_pair(j);
    q[4 * j + 0] = fmaf(blk[4 * j + 0], f.x, q[4 * j + 0]);
    q[4 * j + 1] = fmaf(blk[4 * j + 1], f.y, q[4 * j + 1]);
    q[4 * j + 2] = fmaf(blk[4 * j + 2], f.x, q[4 * j + 2]);
    q[4 * j + 3] = fmaf(blk[4 * j + 3], f.y, q[4 * j + 3]);
  }
}

// The factors sw * sx[column]: sw the block's weight scale and sx (shared memory, 8-byte aligned)
// its 128 x scales.
__device__ __forceinline__ void add_scaled_block(float (&q)[kWgmmaN128Accumulators],
                                                 const float (&blk)[kWgmmaN128Accumulators], const float* sx, float sw,
                                                 int t) {
  add_block_times(q, blk, [&](int j) {
    const float2 sx01 = *reinterpret_cast<const float2*>(sx + 8 * j + 2 * t);
    return make_float2(sw * sx01.x, sw * sx01.y);
  });
}

// The factors already multiplied (shared memory, 8-byte aligned: factors[c] for column c).
__device__ __forceinline__ void add_scaled_block_factors(float (&q)[kWgmmaN128Accumulators],
                                                         const float (&blk)[kWgmmaN128Accumulators],
                                                         const float* factors, int t, int columns = 128) {
  add_block_times(
      q, blk, [&](int j) { return *reinterpret_cast<const float2*>(factors + 8 * j + 2 * t); }, columns);
}

#undef DSV4_WGMMA_N128_OUTPUTS
#undef DSV4_WGMMA_N128_REGISTERS
#undef DSV4_WGMMA_D16
#undef DSV4_WGMMA_D4
#undef DSV4_WGMMA_R0
#undef DSV4_WGMMA_R16
#undef DSV4_WGMMA_R32
#undef DSV4_WGMMA_R48
#undef DSV4_WGMMA_R64
#undef DSV4_WGMMA_R80
#undef DSV4_WGMMA_R96
#undef DSV4_WGMMA_R112

}  // namespace dsv4::kernels
