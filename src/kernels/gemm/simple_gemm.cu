// The two kernels behind simple_gemm, both in simple_gemm.h's summation order (64-column chunks,
// an fmaf chain inside each chunk, the chunks' partials added in order).
// Tiled: 64x64 output tiles, 16-deep K slices in shared memory, 4x4 outputs per thread, weights
// converted to fp32 as they are loaded; each output keeps a chunk accumulator that is added into
// its total every 64 columns.
// GEMV: a block takes a few weight rows and up to 16 rows of x; each thread computes whole chunks
// (one weight row's chunk for all the block's x rows at a time) from 16-byte weight loads, the
// partials meet in shared memory, and one thread per output adds them in chunk order.
#include "kernels/gemm/simple_gemm.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kChunk = static_cast<int>(kSimpleGemmChunk);

template <bool XBf16>
using XElem = std::conditional_t<XBf16, uint16_t, float>;

template <GemmWeight W>
using WElem = std::conditional_t<W == GemmWeight::kF32, float, std::conditional_t<W == GemmWeight::kBF16, uint16_t, uint8_t>>;

// An e4m3 code's exact value (e4m3 -> f16 and f16 -> f32 are both exact).
__device__ __forceinline__ float e4m3_value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

// The pow2 scale of weight element (row, col), row counted over all groups.
__device__ __forceinline__ float e4m3_scale(const SimpleGemmParams& p, int64_t row, int64_t col) {
  return p.w_scale[(row / 128) * p.w_scale_ld + col / 128];
}

template <GemmWeight W>
__device__ __forceinline__ float weight_at(const SimpleGemmParams& p, int64_t row, int64_t col) {
  const WElem<W> v = static_cast<const WElem<W>*>(p.w)[row * p.k + col];
  if constexpr (W == GemmWeight::kF32) return v;
  else if constexpr (W == GemmWeight::kBF16) return bf16_to_float(v);
  else return __fmul_rn(e4m3_value(v), e4m3_scale(p, row, col));  // exact: the scale is a power of two
}

template <bool XBf16>
__device__ __forceinline__ float x_value(XElem<XBf16> v) {
  if constexpr (XBf16) return bf16_to_float(v);
  else return v;
}

// ---- tiled kernel ------------------------------------------------------------------------------

constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kTiledThreads = 256;
// Above 16 x rows the GEMV re-reads x for every weight row, so its time grows with m * n * k; the
// tiled kernel, with few tiles at these shapes, costs ~0.4 ms whatever the size. Measured on the
// H200 at m = 64 (bench_simple_gemm): 67M multiply-adds GEMV 77 us / tiled 422 us, 134M 151 / 421,
// 2.1G 1192 / 526; so the GEMV up to 2^28.
constexpr int64_t kGemvMaxMultiplyAdds = int64_t{1} << 28;
static_assert(kChunk % kTileK == 0, "a K slice must not straddle a chunk boundary");

template <bool XBf16, GemmWeight W>
__global__ void __launch_bounds__(kTiledThreads) tiled_kernel(SimpleGemmParams p) {
  pdl_wait();
  __shared__ float xs[kTileK][kTileM + 1];
  __shared__ float ws[kTileK][kTileN + 1];
  const int64_t g = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int64_t w_row0 = g * p.n;
  const XElem<XBf16>* x = static_cast<const XElem<XBf16>*>(p.x.data) + g * p.x_group_stride;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float chunk_acc[4][4] = {}, total[4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    for (int e = tid; e < kTileM * kTileK; e += kTiledThreads) {
      const int r = e / kTileK, c = e % kTileK;
      const int64_t row = m0 + r, col = k0 + c;
      xs[c][r] = (row < p.m && col < p.k) ? x_value<XBf16>(x[row * p.ldx + col]) : 0.0f;
    }
    for (int e = tid; e < kTileN * kTileK; e += kTiledThreads) {
      const int r = e / kTileK, c = e % kTileK;
      const int64_t row = n0 + r, col = k0 + c;
      ws[c][r] = (row < p.n && col < p.k) ? weight_at<W>(p, w_row0 + row, col) : 0.0f;
    }
    __syncthreads();
    // Columns past K hold zeros: fmaf(0, 0, a) == a except that -0 becomes +0, which the total
    // (never -0: it starts at +0 and adds) cannot see.
#pragma unroll
    for (int c = 0; c < kTileK; ++c) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[c][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[c][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) chunk_acc[i][j] = fmaf(a[i], b[j], chunk_acc[i][j]);
    }
    __syncthreads();
    const int64_t k1 = k0 + kTileK;
    if (k1 % kChunk == 0 || k1 >= p.k) {  // the end of a chunk
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          total[i][j] = __fadd_rn(total[i][j], chunk_acc[i][j]);
          chunk_acc[i][j] = 0.0f;
        }
    }
  }
  const int64_t y_off = g * p.y_group_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (row < p.m && col < p.n) store_float(p.y, y_off + row * p.ldy + col, total[i][j]);
    }
}

// ---- GEMV kernel -------------------------------------------------------------------------------

constexpr int kGemvThreads = 128;
constexpr int kGemvMaxXRows = 16;                 // rows of x per block
constexpr int64_t kGemvMaxSharedBytes = 48 * 1024;  // without opting in to more

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Element e of a weight chunk held as 16-byte words (an e4m3 code times its block scale s).
template <GemmWeight W>
__device__ __forceinline__ float chunk_weight(const uint4* raw, int e, float s) {
  constexpr int kBytes = sizeof(WElem<W>);
  const int byte = e * kBytes;
  const uint32_t word = word_of(raw[byte / 16], (byte % 16) / 4);
  const int shift = 8 * (byte % 4);
  if constexpr (W == GemmWeight::kF32) return __uint_as_float(word);
  else if constexpr (W == GemmWeight::kBF16) return bf16_to_float(static_cast<uint16_t>(word >> shift));
  else return __fmul_rn(e4m3_value(static_cast<uint8_t>(word >> shift)), s);
}

// x[col .. col + 7] of one row; &row[col] is 16-byte aligned.
template <bool XBf16>
__device__ __forceinline__ void load_x8(const XElem<XBf16>* row, int64_t col, float (&v)[8]) {
  if constexpr (XBf16) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(row + col));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = word_of(u, i);
      v[2 * i] = bf16_to_float(static_cast<uint16_t>(w));
      v[2 * i + 1] = bf16_to_float(static_cast<uint16_t>(w >> 16));
    }
  } else {
    const float4* q = reinterpret_cast<const float4*>(row + col);
    const float4 a = __ldg(q), b = __ldg(q + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}

// Block (bx, by, g): weight rows (outputs) j = bx*rows_per_block .. +rows_per_block of group g and
// x rows by*kXRows .. +kXRows. Work item q = jl * chunks + c is chunk c of output jl; its partials
// for the block's x rows go to partials[r * (items + 1) + q] (the +1 staggers the banks the final
// sums read). vectorised: every full chunk's weights and x rows can be read in 16-byte loads.
template <bool XBf16, GemmWeight W, int kXRows>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(SimpleGemmParams p, int rows_per_block, bool vectorised) {
  pdl_wait();
  extern __shared__ float partials[];  // [kXRows][items + 1]
  const int chunks = static_cast<int>((p.k + kChunk - 1) / kChunk);
  const int items = rows_per_block * chunks, stride = items + 1;
  const int64_t g = blockIdx.z;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kXRows;
  const int x_rows = static_cast<int>(p.m - m0 < kXRows ? p.m - m0 : kXRows);
  const XElem<XBf16>* x = static_cast<const XElem<XBf16>*>(p.x.data) + g * p.x_group_stride + m0 * p.ldx;

  for (int q = threadIdx.x; q < items; q += blockDim.x) {
    const int64_t j = n0 + q / chunks;
    const int c = q % chunks;
    float acc[kXRows] = {};
    if (j < p.n) {
      const int64_t w_row = g * p.n + j;
      const int64_t k0 = static_cast<int64_t>(c) * kChunk;
      const int64_t len = p.k - k0 < kChunk ? p.k - k0 : kChunk;
      if (vectorised && len == kChunk) {
        constexpr int kLoads = kChunk * static_cast<int>(sizeof(WElem<W>)) / 16;
        const uint4* src = reinterpret_cast<const uint4*>(static_cast<const WElem<W>*>(p.w) + w_row * p.k + k0);
        uint4 raw[kLoads];
#pragma unroll
        for (int i = 0; i < kLoads; ++i) raw[i] = __ldg(src + i);
        const float s = W == GemmWeight::kE4M3 ? e4m3_scale(p, w_row, k0) : 1.0f;  // a chunk lies in one 128-block
#pragma unroll
        for (int e0 = 0; e0 < kChunk; e0 += 8) {
          float wv[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) wv[e] = chunk_weight<W>(raw, e0 + e, s);
#pragma unroll
          for (int r = 0; r < kXRows; ++r) {
            if (r < x_rows) {
              float xv[8];
              load_x8<XBf16>(x + r * p.ldx, k0 + e0, xv);
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[r] = fmaf(xv[e], wv[e], acc[r]);
            }
          }
        }
      } else {
        for (int64_t col = k0; col < k0 + len; ++col) {
          const float wv = weight_at<W>(p, w_row, col);
#pragma unroll
          for (int r = 0; r < kXRows; ++r)
            if (r < x_rows) acc[r] = fmaf(x_value<XBf16>(x[r * p.ldx + col]), wv, acc[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kXRows; ++r) partials[r * stride + q] = acc[r];
  }
  __syncthreads();

  for (int o = threadIdx.x; o < rows_per_block * x_rows; o += blockDim.x) {
    const int r = o / rows_per_block, jl = o % rows_per_block;
    const int64_t j = n0 + jl;
    if (j >= p.n) continue;
    const float* part = partials + r * stride + jl * chunks;
    float total = 0.0f;
    for (int c = 0; c < chunks; ++c) total = __fadd_rn(total, part[c]);
    store_float(p.y, g * p.y_group_stride + (m0 + r) * p.ldy + j, total);
  }
}

// ---- launch ------------------------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t weight_bytes(GemmWeight w) { return w == GemmWeight::kF32 ? 4 : w == GemmWeight::kBF16 ? 2 : 1; }

// How the GEMV covers a product: x rows per block (1, 4 or 16), weight rows per block (enough
// chunks to give each thread one), its shared memory.
struct GemvPlan {
  int x_rows = 0;
  int rows_per_block = 0;
  size_t shared_bytes = 0;
  bool fits = false;
};

GemvPlan gemv_plan(const SimpleGemmParams& p) {
  GemvPlan plan;
  plan.x_rows = p.m <= 1 ? 1 : p.m <= 4 ? 4 : kGemvMaxXRows;
  const int64_t chunks = ceil_div(p.k, kChunk);
  const int64_t rows = chunks >= kGemvThreads ? 1 : kGemvThreads / (chunks > 0 ? chunks : 1);
  const int64_t bytes = plan.x_rows * (rows * chunks + 1) * static_cast<int64_t>(sizeof(float));
  plan.rows_per_block = static_cast<int>(rows);
  plan.shared_bytes = static_cast<size_t>(bytes);
  plan.fits = bytes <= kGemvMaxSharedBytes && ceil_div(p.m, plan.x_rows) <= 65535 && p.groups <= 65535;
  return plan;
}

template <bool XBf16, GemmWeight W, int kXRows>
void launch_gemv(const SimpleGemmParams& p, const GemvPlan& plan, cudaStream_t stream) {
  const int64_t xb = XBf16 ? 2 : 4;
  const bool vectorised = aligned16(p.w) && p.k * weight_bytes(W) % 16 == 0 && aligned16(p.x.data) &&
                          (p.m == 1 || p.ldx * xb % 16 == 0) && (p.groups == 1 || p.x_group_stride * xb % 16 == 0);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, plan.rows_per_block)), static_cast<unsigned>(ceil_div(p.m, kXRows)),
                  static_cast<unsigned>(p.groups));
  launch_pdl(gemv_kernel<XBf16, W, kXRows>, grid, kGemvThreads, plan.shared_bytes, stream, p, plan.rows_per_block, vectorised);
}

template <bool XBf16, GemmWeight W>
void launch_typed(const SimpleGemmParams& p, bool gemv, const GemvPlan& plan, cudaStream_t stream) {
  if (!gemv) {
    const dim3 grid(static_cast<unsigned>(ceil_div(p.n, kTileN)), static_cast<unsigned>(ceil_div(p.m, kTileM)),
                    static_cast<unsigned>(p.groups));
    launch_pdl(tiled_kernel<XBf16, W>, grid, kTiledThreads, 0, stream, p);
  } else if (plan.x_rows == 1) {
    launch_gemv<XBf16, W, 1>(p, plan, stream);
  } else if (plan.x_rows == 4) {
    launch_gemv<XBf16, W, 4>(p, plan, stream);
  } else {
    launch_gemv<XBf16, W, kGemvMaxXRows>(p, plan, stream);
  }
}

template <bool XBf16>
void launch_for_x(const SimpleGemmParams& p, bool gemv, const GemvPlan& plan, cudaStream_t stream) {
  switch (p.w_type) {
    case GemmWeight::kF32: launch_typed<XBf16, GemmWeight::kF32>(p, gemv, plan, stream); break;
    case GemmWeight::kBF16: launch_typed<XBf16, GemmWeight::kBF16>(p, gemv, plan, stream); break;
    case GemmWeight::kE4M3: launch_typed<XBf16, GemmWeight::kE4M3>(p, gemv, plan, stream); break;
  }
}

}  // namespace

SimpleGemmKernel simple_gemm_choice(const SimpleGemmParams& p) {
  const GemvPlan plan = gemv_plan(p);
  switch (p.kernel) {
    case SimpleGemmKernel::kAuto: {
      const int64_t multiply_adds = p.m * p.n * p.groups * p.k;
      return plan.fits && (p.m <= kGemvMaxXRows || multiply_adds <= kGemvMaxMultiplyAdds) ? SimpleGemmKernel::kGemv
                                                                                         : SimpleGemmKernel::kTiled;
    }
    case SimpleGemmKernel::kTiled: return SimpleGemmKernel::kTiled;
    case SimpleGemmKernel::kGemv:
      if (!plan.fits)
        throw UsageError("simple_gemm: the GEMV kernel cannot run m=" + std::to_string(p.m) + ", k=" +
                         std::to_string(p.k) + ", groups=" + std::to_string(p.groups) + ": its partials need " +
                         std::to_string(plan.shared_bytes) + " bytes of shared memory (at most " +
                         std::to_string(kGemvMaxSharedBytes) + "), or the grid is too tall");
      return SimpleGemmKernel::kGemv;
  }
  throw UsageError("simple_gemm: unknown kernel " + std::to_string(static_cast<int>(p.kernel)));
}

void simple_gemm(const SimpleGemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0 || p.groups == 0) return;
  const bool gemv = simple_gemm_choice(p) == SimpleGemmKernel::kGemv;
  const GemvPlan plan = gemv_plan(p);
  if (p.x.bf16) launch_for_x<true>(p, gemv, plan, stream);
  else launch_for_x<false>(p, gemv, plan, stream);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
