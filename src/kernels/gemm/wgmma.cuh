// Hopper's warpgroup MMA (WGMMA) pieces shared by the kernels that use it (fp8_mma_gemm's FP8
// kernel, f16_wgmma_gemm, sparse_attn_wgmma): shared-memory matrix descriptors of 128-byte-swizzled
// K-major and MN-major tiles, the fences and waits around the asynchronous MMAs, the MMAs they
// issue, and adding a K block's sums into the running lane sums.
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

#define DSV4_WGMMA_N128_OUTPUTS                                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),    \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),     \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),    \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),    \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),    \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),    \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),    \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define DSV4_WGMMA_N128_REGISTERS                                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                              \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "

// d (+)= A (64 x 32 e4m3, desc_a) x B (128 x 32 e4m3, desc_b)^T; accumulate = false overwrites d.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[kWgmmaN128Accumulators], uint64_t desc_a,
                                                      uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DSV4_WGMMA_N128_REGISTERS "%64, %65, p, 1, 1;\n}\n"
      : DSV4_WGMMA_N128_OUTPUTS
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0));
}

// d += A (64 x 16, desc_a) x B (128 x 16, desc_b)^T, both K-major, of fp16 values (kBf16 false)
// or bf16 ones.
#define DSV4_WGMMA_M64N128K16_SS(type)                                                              \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." type "." type " " DSV4_WGMMA_N128_REGISTERS \
  "%64, %65, 1, 1, 1, 0, 0;\n"
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n128k16_16bit(float (&d)[kWgmmaN128Accumulators], uint64_t desc_a,
                                                       uint64_t desc_b) {
  if constexpr (kBf16)
    asm volatile(DSV4_WGMMA_M64N128K16_SS("bf16") : DSV4_WGMMA_N128_OUTPUTS : "l"(desc_a), "l"(desc_b));
  else
    asm volatile(DSV4_WGMMA_M64N128K16_SS("f16") : DSV4_WGMMA_N128_OUTPUTS : "l"(desc_a), "l"(desc_b));
}
#undef DSV4_WGMMA_M64N128K16_SS

// d += A (64 x 16 fp16, from registers) x B (N x 16 fp16, desc_b, K-major)^T for N = 32, 64, 96
// or 128: d holds an m64n128 accumulator, of which the MMA reads and writes the first N / 2
// registers (columns 0 .. N - 1); an output's sum does not depend on N. Warp w of the warpgroup
// gives rows 16 w .. 16 w + 15 of A in mma.sync.m16n8k16's fragment layout: lane (g, t) holds a[0]
// = (row g, columns 2t, 2t + 1), a[1] = (g + 8, 2t..), a[2] = (g, 2t + 8..), a[3] = (g + 8, 2t +
// 8..), low column in the low half. The registers must keep their values until a wgmma_wait shows
// the MMA done.
template <int N>
__device__ __forceinline__ void wgmma_m64nk16_f16_a_regs(float (&d)[kWgmmaN128Accumulators], const uint32_t (&a)[4],
                                                         uint64_t desc_b) {
  static_assert(N == 32 || N == 64 || N == 96 || N == 128, "wgmma_m64nk16_f16_a_regs: N is 32, 64, 96 or 128");
  if constexpr (N == 32)
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  else if constexpr (N == 64)
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  else if constexpr (N == 96)
    asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
                 "{%48, %49, %50, %51}, %52, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  else if constexpr (N == 128)
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " DSV4_WGMMA_N128_REGISTERS
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
                 : DSV4_WGMMA_N128_OUTPUTS
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// d += A (64 x 16 bf16, desc_a) x B (32 x 16 bf16, desc_b)^T, both K-major.
__device__ __forceinline__ void wgmma_m64n32k16_bf16(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
               "%16, %17, 1, 1, 1, 0, 0;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(desc_a), "l"(desc_b));
}

// d += A (64 x 16 bf16, desc_a, K-major) x B (16 x 256 bf16, desc_b, MN-major: wgmma_descriptor_mn_major).
__device__ __forceinline__ void wgmma_m64n256k16_bf16_mn_b(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
               "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
               "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
               "%128, %129, 1, 1, 1, 0, 1;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                 "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                 "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                 "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                 "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                 "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                 "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                 "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                 "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
                 "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
                 "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
                 "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
                 "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
                 "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
                 "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
                 "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
                 "+f"(d[126]), "+f"(d[127])
               : "l"(desc_a), "l"(desc_b));
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

}  // namespace dsv4::kernels
