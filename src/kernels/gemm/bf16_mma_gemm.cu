// The bf16 tensor-core GEMM (see bf16_mma_gemm.h for the summation order). Streamed kernel: a block of 4 warps owns
// 16 weight rows and up to 8 * NT x rows; warp j takes the K blocks b with b mod 4 == j and the
// block adds the four partial sums in order at the end. mma.sync m16n8k16 (bf16) takes the weight
// rows as A and the x rows as B. Each lane reads the same 32 K positions of its rows per K block
// (values 32t .. 32t + 31) straight from global memory: for MMA step s lane (g, t) feeds positions
// 32t + 4s .. 32t + 4s + 3 as the fragment's K slots 2t, 2t+1 and 2t+8, 2t+9 (any permutation of
// K applied to both operands leaves the products' sum unchanged). A warp loads its next block's
// weight and x before it multiplies the current one, so one block's bytes are always in flight
// behind the arithmetic (a decode-sized batch is bound by the weight's bytes).
#include "kernels/gemm/bf16_mma_gemm.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/gemm/staged_tiles.cuh"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 4;          // K lanes of a block
constexpr int kRowsPerBlock = 16;  // weight rows of a block (one MMA's M)
constexpr int64_t kKBlock = 128;

// The output a block's weight rows belong to (blockIdx.x counts 16-row blocks over the first
// output's rows, then the second's) and its first row.
struct BlockOutput {
  Bf16MmaOutput out;
  int64_t n0 = 0;
};

__device__ __forceinline__ BlockOutput block_output(const Bf16MmaGemmParams& p) {
  const int64_t first_blocks = (p.n + kRowsPerBlock - 1) / kRowsPerBlock, b = blockIdx.x;
  if (b < first_blocks) return {{p.w, p.y, p.ldy, p.n}, b * kRowsPerBlock};
  return {p.second, (b - first_blocks) * kRowsPerBlock};
}

// One warp's operands of a K block: its lane's 32 values of weight rows g and g + 8 and of x rows
// 8j + g.
template <int NT>
struct BlockOperands {
  Bf16x32 w_lo, w_hi, x[NT];
};

template <int NT>  // 8-row x tiles per block
__global__ void __launch_bounds__(kWarps * 32) bf16_mma_gemm_kernel(Bf16MmaGemmParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const BlockOutput o = block_output(p);
  const int64_t n0 = o.n0;
  const int64_t x_row0 = static_cast<int64_t>(blockIdx.y) * 8 * NT;
  const int64_t x_rows = min(static_cast<int64_t>(8 * NT), p.m - x_row0);
  const int64_t kblocks = p.k / kKBlock;
  const bool row_a = n0 + g < o.out.n, row_b = n0 + g + 8 < o.out.n;
  const uint16_t* wa = o.out.w + (n0 + g) * p.k + 32 * t;
  const uint16_t* wb = wa + 8 * p.k;

  auto load_weight = [&](BlockOperands<NT>& o, int64_t b) {
    o.w_lo = load_bf16x32(wa + b * kKBlock, row_a && b < kblocks);
    o.w_hi = load_bf16x32(wb + b * kKBlock, row_b && b < kblocks);
  };
  auto load_x = [&](BlockOperands<NT>& o, int64_t b) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int r = 8 * j + g;
      o.x[j] = load_bf16x32(p.x + (x_row0 + r) * p.ldx + b * kKBlock + 32 * t, r < x_rows && b < kblocks);
    }
  };

  // The weight is never written by the kernel before this one: its first block loads before the
  // wait (programmatic dependent launch), x after.
  BlockOperands<NT> next;
  load_weight(next, warp);
  pdl_wait();
  load_x(next, warp);

  float q[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) q[j][0] = q[j][1] = q[j][2] = q[j][3] = 0.0f;

  for (int64_t b = warp; b < kblocks; b += kWarps) {
    const BlockOperands<NT> cur = next;
    load_weight(next, b + kWarps);
    load_x(next, b + kWarps);
    float blk[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) blk[j][0] = blk[j][1] = blk[j][2] = blk[j][3] = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint32_t a0 = cur.w_lo.word(2 * s), a2 = cur.w_lo.word(2 * s + 1);
      const uint32_t a1 = cur.w_hi.word(2 * s), a3 = cur.w_hi.word(2 * s + 1);
#pragma unroll
      for (int j = 0; j < NT; ++j) mma_bf16_f32(blk[j], a0, a1, a2, a3, cur.x[j].word(2 * s), cur.x[j].word(2 * s + 1));
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) q[j][c] = __fadd_rn(q[j][c], blk[j][c]);
  }

  sum_lanes_and_store<kWarps, NT>(q, [&](int r, int row, float sum) {
    const int64_t n = n0 + row;
    if (r < x_rows && n < o.out.n) store_float(o.out.y, (x_row0 + r) * o.out.ldy + n, sum);
  });
}

// The split kernel, for grids too small to fill the GPU (m <= 8, n up to ~1000: the MoE gate, the
// compressors, the indexer's weights_proj at batch 1): 16 warps per block share the K blocks of a
// chunk (warp w takes the chunk's block w), each loaded a chunk ahead, and leave each blk_b in
// shared memory; warps 0..3 then add them into the lanes q_j in the header's order, so the bits
// are those of bf16_mma_gemm_kernel<1>.
constexpr int kSplitWarps = 16;                 // also the K blocks of a chunk, a multiple of kWarps
constexpr int64_t kSplitMaxBlocks = 64;         // half the H200's SMs: bigger grids fill the GPU as they are

__global__ void __launch_bounds__(kSplitWarps * 32) bf16_mma_gemm_split_kernel(Bf16MmaGemmParams p) {
  static_assert(kSplitWarps % kWarps == 0, "a chunk's block b sits at b mod kSplitWarps, so b mod 4 is kept");
  __shared__ float chunk_sums[kSplitWarps][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const BlockOutput o = block_output(p);
  const int64_t n0 = o.n0;
  const int64_t x_rows = min(static_cast<int64_t>(8), p.m);
  const int64_t kblocks = p.k / kKBlock;
  const bool row_a = n0 + g < o.out.n, row_b = n0 + g + 8 < o.out.n, x_row = g < x_rows;
  const uint16_t* wa = o.out.w + (n0 + g) * p.k + 32 * t;
  const uint16_t* wb = wa + 8 * p.k;
  const uint16_t* xa = p.x + g * p.ldx + 32 * t;

  BlockOperands<1> next;
  auto load_weight = [&](int64_t b) {
    next.w_lo = load_bf16x32(wa + b * kKBlock, row_a && b < kblocks);
    next.w_hi = load_bf16x32(wb + b * kKBlock, row_b && b < kblocks);
  };
  auto load_x = [&](int64_t b) { next.x[0] = load_bf16x32(xa + b * kKBlock, x_row && b < kblocks); };

  load_weight(warp);
  pdl_wait();
  load_x(warp);
  float q[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  for (int64_t b0 = 0; b0 < kblocks; b0 += kSplitWarps) {
    const BlockOperands<1> cur = next;
    load_weight(b0 + kSplitWarps + warp);  // the next chunk's bytes travel while this one is summed
    load_x(b0 + kSplitWarps + warp);
    if (b0 + warp < kblocks) {
      float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int s = 0; s < 8; ++s)
        mma_bf16_f32(blk, cur.w_lo.word(2 * s), cur.w_hi.word(2 * s), cur.w_lo.word(2 * s + 1),
                     cur.w_hi.word(2 * s + 1), cur.x[0].word(2 * s), cur.x[0].word(2 * s + 1));
#pragma unroll
      for (int c = 0; c < 4; ++c) chunk_sums[warp][c][lane] = blk[c];
    }
    __syncthreads();  // the chunk's blk are in
    if (warp < kWarps)
      for (int i = warp; i < kSplitWarps && b0 + i < kblocks; i += kWarps)
#pragma unroll
        for (int c = 0; c < 4; ++c) q[0][c] = __fadd_rn(q[0][c], chunk_sums[i][c][lane]);
    __syncthreads();  // the lanes have read them before the next chunk's overwrite
  }

  sum_lanes_and_store<kWarps, 1>(q, [&](int r, int row, float sum) {
    const int64_t n = n0 + row;
    if (r < x_rows && n < o.out.n) store_float(o.out.y, r * o.out.ldy + n, sum);
  });
}

// ---- The staged kernel (prefill, and the LM head of decode batches) ----
//
// A CTA of 8 warps owns 128 weight rows [n0, n0 + 128) and 16 NJ x rows: 128, or 64 for calls of
// up to 64 rows, whose 128-row tiles would spend half the MMAs on padding (the LM head at batch
// 64: 0.78 ms with 128, 0.55 ms with 64; docs/PERF.md, session 16). Each K block comes into
// shared memory in two halves with cp.async, three halves ahead: half h holds, of every row, the
// values 32t + 16h .. 32t + 16h + 15 for t = 0..3 (the values lane t feeds to MMA steps 4h ..
// 4h + 3), as 8 chunks of 16 bytes, chunk 2t + u holding values 32t + 16h + 8u .. + 7, so every
// operand byte crosses L2 once per CTA instead of once per warp. Warp (wm, wn) = (warp % 4,
// warp / 4) computes weight rows 32 wm .. 32 wm + 31 (two m16 tiles i) against x rows 8 NJ wn ..
// 8 NJ wn + 8 NJ - 1 (NJ n8 tiles j), issuing for every output the streamed kernel's eight MMAs
// per block with the same operands in the same fragment slots; the CTA walks the blocks in
// staged_block_at's order (pass p accumulates lane q_p) with the running sum of the four lanes in
// shared memory: the streamed kernel's bits. A half's row r keeps its chunk c at chunk c ^ (r % 8)
// of its 128 bytes: the eight lanes a 128-bit load serves at once (rows 2h', 2h' + 1, t = 0..3,
// chunk 2t + u) hit eight distinct bank groups.
constexpr int kStagedWarps = 8;
constexpr int kStagedThreads = kStagedWarps * 32;
constexpr int kStagedRows = 128;  // weight rows of a CTA
constexpr int kHalfStages = 4;
constexpr int kHalfRowBytes = 128;  // a row's 64 bf16 values of a half
constexpr int kWHalfBytes = kStagedRows * kHalfRowBytes;

template <int NJ>  // n8 tiles a warp: x rows of a CTA 16 NJ
struct StagedShape {
  static constexpr int kXRows = 16 * NJ;
  static constexpr int kHalfStageBytes = kWHalfBytes + kXRows * kHalfRowBytes;  // weight, then x
  static constexpr int kOutputsPerLane = 2 * NJ * 4;  // m16 tiles x n8 tiles x accumulator registers
  static constexpr int kSumBytes = kStagedWarps * kOutputsPerLane * 32 * static_cast<int>(sizeof(float));
  static constexpr int kSharedBytes = kHalfStages * kHalfStageBytes + kSumBytes;  // 196608 for NJ = 8
  static_assert(kSharedBytes <= 227 * 1024, "the staged kernel's shared memory exceeds Hopper's 227 KiB");
};
using DecodeShape = StagedShape<4>;   // 64 x rows
using PrefillShape = StagedShape<8>;  // 128 x rows
// x rows of the staged CTA for m rows.
constexpr int64_t staged_x_rows(int64_t m) {
  return m <= DecodeShape::kXRows ? DecodeShape::kXRows : PrefillShape::kXRows;
}
// The dense rule of kernels::fp8_mma_gemm: from 64 rows, when the grid has 40 tiles of 128 x 128.
constexpr int64_t kStagedMinRows = 64;
constexpr int64_t kStagedMinTiles = 40;

__device__ __forceinline__ uint32_t half_chunk_at(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r % 8)) << 4));
}

template <int NJ>
__global__ void __launch_bounds__(kStagedThreads, 1) bf16_mma_gemm_staged_kernel(Bf16MmaGemmParams p) {
  using Shape = StagedShape<NJ>;
  constexpr int kHalfStageBytes = Shape::kHalfStageBytes;
  pdl_wait();
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp % 4, wn = warp / 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kStagedRows;
  const int64_t x_row0 = static_cast<int64_t>(blockIdx.y) * Shape::kXRows;
  const int x_rows = static_cast<int>(min(static_cast<int64_t>(Shape::kXRows), p.m - x_row0));
  const int kblocks = static_cast<int>(p.k / kKBlock);

  // This thread's copies per half: chunk c = tid % 8 (values 32 (c / 2) + 16h + 8 (c % 2) ..) of
  // weight rows tid / 8 + 32 i (i = 0..3) and x rows tid / 8 + 32 i (i < 16 NJ / 32).
  const int copy_row = tid / 8, copy_chunk = tid % 8;
  const int64_t copy_value = 32 * (copy_chunk / 2) + 8 * (copy_chunk % 2);
  const uint16_t* w_src = p.w + (n0 + copy_row) * p.k + copy_value;
  const uint16_t* x_src = p.x + (x_row0 + copy_row) * p.ldx + copy_value;
  const uint32_t smem0 = shared_address(smem);
  // Half-step hs: half hs % 2 of the block the walk reaches at step hs / 2.
  auto load_half = [&](int hs) {
    if (hs < 2 * kblocks) {
      const int64_t at = staged_block_at(hs / 2, kblocks) * kKBlock + 16 * (hs % 2);
      const uint32_t stage = smem0 + static_cast<uint32_t>((hs % kHalfStages) * kHalfStageBytes);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = copy_row + 32 * i;
        const bool w_valid = n0 + row < p.n, x_valid = row < x_rows;
        const uint32_t dst = half_chunk_at(row, copy_chunk);
        cp_async16(stage + dst, w_valid ? w_src + (32 * i) * p.k + at : p.w, w_valid);
        if (32 * i < Shape::kXRows)
          cp_async16(stage + kWHalfBytes + dst, x_valid ? x_src + (32 * i) * p.ldx + at : p.x, x_valid);
      }
    }
    cp_async_commit();
  };
  float* sums = reinterpret_cast<float*>(smem + kHalfStages * kHalfStageBytes) + warp * Shape::kOutputsPerLane * 32 + lane;

#pragma unroll
  for (int hs = 0; hs < kHalfStages - 1; ++hs) load_half(hs);

  int step = 0;
  for (int pass = 0; pass < 4; ++pass) {
    float q[2][NJ][4];
    zero_tiles(q);

    for (int b = pass; b < kblocks; b += 4, ++step) {
      float blk[2][NJ][4];
      zero_tiles(blk);
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // MMA steps 4 half .. 4 half + 3
        const int hs = 2 * step + half;
        cp_async_wait<kHalfStages - 2>();
        __syncthreads();  // half-step hs is in; every warp is done with hs - 1's stage, which the next load takes
        load_half(hs + kHalfStages - 1);
        const uint8_t* stage = smem + (hs % kHalfStages) * kHalfStageBytes;
#pragma unroll
        for (int u = 0; u < 2; ++u) {  // chunk 2t + u: steps 4 half + 2u and + 1
          uint4 a_lo[2], a_hi[2], xb[NJ];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int row = 32 * wm + 16 * i + g;
            a_lo[i] = *reinterpret_cast<const uint4*>(stage + half_chunk_at(row, 2 * t + u));
            a_hi[i] = *reinterpret_cast<const uint4*>(stage + half_chunk_at(row + 8, 2 * t + u));
          }
#pragma unroll
          for (int j = 0; j < NJ; ++j)
            xb[j] = *reinterpret_cast<const uint4*>(stage + kWHalfBytes + half_chunk_at(8 * NJ * wn + 8 * j + g, 2 * t + u));
#pragma unroll
          for (int sub = 0; sub < 2; ++sub)  // step 4 half + 2u + sub: values 32t + 4 step .. + 3
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
              for (int j = 0; j < NJ; ++j)
                mma_bf16_f32(blk[i][j], word_of(a_lo[i], 2 * sub), word_of(a_hi[i], 2 * sub), word_of(a_lo[i], 2 * sub + 1),
                             word_of(a_hi[i], 2 * sub + 1), word_of(xb[j], 2 * sub), word_of(xb[j], 2 * sub + 1));
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) q[i][j][c] = __fadd_rn(q[i][j][c], blk[i][j][c]);
    }

    fold_pass(sums, q, pass);
  }
  cp_async_wait<0>();  // no copy may still be landing when the block's shared memory is reused

  for_each_sum<2, NJ>(sums, [&](int i, int j, int c, const float& sum) {
    const int r = 8 * NJ * wn + 8 * j + 2 * t + (c & 1);
    const int64_t n = n0 + 32 * wm + 16 * i + g + (c >= 2 ? 8 : 0);
    if (r < x_rows && n < p.n) store_float(p.y, (x_row0 + r) * p.ldy + n, sum);
  });
}

template <int NJ>
void launch_staged(const Bf16MmaGemmParams& p, cudaStream_t stream) {
  using Shape = StagedShape<NJ>;
  const int64_t tiles = (p.m + Shape::kXRows - 1) / Shape::kXRows;
  if (tiles > 65535) throw UsageError("bf16_mma_gemm: " + std::to_string(p.m) + " rows exceed one launch (split the call)");
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(bf16_mma_gemm_staged_kernel<NJ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Shape::kSharedBytes));
  const dim3 grid(static_cast<unsigned>((p.n + kStagedRows - 1) / kStagedRows), static_cast<unsigned>(tiles));
  launch_pdl(bf16_mma_gemm_staged_kernel<NJ>, grid, kStagedThreads, Shape::kSharedBytes, stream, p);
}

}  // namespace

bool bf16_mma_gemm_supports(const Bf16MmaGemmParams& p) {
  return p.k > 0 && p.k % kKBlock == 0 && p.ldx % 8 == 0 && aligned16(p.x) && aligned16(p.w) &&
         (p.second.n == 0 || aligned16(p.second.w));
}

Bf16MmaKernel bf16_mma_gemm_choice(const Bf16MmaGemmParams& p) {
  const bool paired = p.second.n > 0;
  switch (p.kernel) {
    case Bf16MmaKernel::kAuto:
      return !paired && p.m >= kStagedMinRows &&
                     (p.m + staged_x_rows(p.m) - 1) / staged_x_rows(p.m) * ((p.n + kStagedRows - 1) / kStagedRows) >=
                         kStagedMinTiles
                 ? Bf16MmaKernel::kStaged
                 : Bf16MmaKernel::kStreamed;
    case Bf16MmaKernel::kStreamed: return p.kernel;
    case Bf16MmaKernel::kStaged:
      if (paired) throw UsageError("bf16_mma_gemm: a second output takes the streamed kernel, not the staged one");
      return p.kernel;
  }
  throw UsageError("bf16_mma_gemm: unknown kernel " + std::to_string(static_cast<int>(p.kernel)));
}

void bf16_mma_gemm(const Bf16MmaGemmParams& p, cudaStream_t stream) {
  if (!bf16_mma_gemm_supports(p))
    throw UsageError("bf16_mma_gemm: k=" + std::to_string(p.k) + ", ldx=" + std::to_string(p.ldx) +
                     ": k must be a multiple of 128, ldx of 8, and both operands 16-byte aligned");
  const int64_t row_blocks = (p.n + kRowsPerBlock - 1) / kRowsPerBlock + (p.second.n + kRowsPerBlock - 1) / kRowsPerBlock;
  if (p.m == 0 || row_blocks == 0) return;
  if (bf16_mma_gemm_choice(p) == Bf16MmaKernel::kStaged) {
    if (staged_x_rows(p.m) == DecodeShape::kXRows) {
      launch_staged<4>(p, stream);
    } else {
      launch_staged<8>(p, stream);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int nt = p.m <= 8 ? 1 : p.m <= 16 ? 2 : 4;
  if (nt == 1 && row_blocks <= kSplitMaxBlocks) {
    launch_pdl(bf16_mma_gemm_split_kernel, dim3(static_cast<unsigned>(row_blocks)), kSplitWarps * 32, 0, stream, p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int64_t tiles = (p.m + 8 * nt - 1) / (8 * nt);
  if (tiles > 65535)
    throw UsageError("bf16_mma_gemm: " + std::to_string(p.m) + " rows exceed one launch (split the call)");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(tiles));
  switch (nt) {
    case 1: launch_pdl(bf16_mma_gemm_kernel<1>, grid, kWarps * 32, 0, stream, p); break;
    case 2: launch_pdl(bf16_mma_gemm_kernel<2>, grid, kWarps * 32, 0, stream, p); break;
    default: launch_pdl(bf16_mma_gemm_kernel<4>, grid, kWarps * 32, 0, stream, p); break;
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
