// The indexer's scores on tensor cores. A CTA takes one token and a range of its visible keys: the
// token's heads are the rows of the MMA tile (ceil(heads / 16) warps, 16 rows each, rows past
// the heads zero), and the keys stream through shared memory in tiles of 64 (cp.async, two
// stages; each key from its pool row through the sequence's block table), each tile read once
// for all heads. Per tile every warp computes its 16 rows x 64 keys of q.k with mma.sync
// m16n8k16 (bf16 operands, fp32 accumulation), writes (w[h] * weight_scale) * relu(q.k) to
// shared memory, and one thread per key then adds the heads in head order, as CpuOps does.
// Decode spreads a token's keys over many CTAs; prefill gives a CTA all of a token's keys. Keys
// packed as MXFP4 (kv/packed_entries.h) are copied as bytes and unpacked into the bf16 stage
// when their tile begins: the same values, so the same scores.
//
// Why the scores equal CpuOps' bit for bit in the default numerics. q and the keys are FP4-QAT'd
// in blocks of 32 along dh (model/indexer.cpp, model/compressor.cpp: Hadamard, then
// fake_quant_block_e2m1 with a pow2 scale per block, stored as bf16). In block b (dims
// 32b..32b+31) q_i = a_i 2^x_b and k_i = c_i 2^y_b with a_i, c_i on the e2m1 grid
// {0, +-0.5, +-1, +-1.5, +-2, +-3, +-4, +-6}: 2a_i and 2c_i are integers of magnitude <= 12, and
// the values are exact in bf16, so the MMA multiplies exactly the values the CPU does. Each
// product is N_i 2^(E_b - 2) with N_i = (2a_i)(2c_i) an integer, |N_i| <= 144, E_b = x_b + y_b;
// it is exact in fp32, and the tensor core forms bf16 products exactly. Let E = min_b E_b and
// D = max_b E_b - E over the 4 blocks. Any sum of any subset of the 128 products is an integer
// multiple of 2^(E-2) of magnitude <= 128 * 144 * 2^D * 2^(E-2) < 2^(15+D) * 2^(E-2), so it has
// at most 15 + D significant bits: for D <= 9 it is exact in fp32 (24 bits).
//   - CpuOps (cpu::dot: 8 running sums, combined pairwise) then adds without ever rounding, and
//     returns the exact dot.
//   - An mma adds 16 products to the accumulator (itself such a partial sum). The tensor core
//     aligns the addends to the largest one and drops the bits below that addend's fp32 ulp, then
//     rounds the sum to fp32. The largest addend is < 2^(E-2+15+D), so its ulp is at most
//     2^(E-2+D-9) <= 2^(E-2) for D <= 9: no addend loses a bit, and the exact sum is
//     representable. Every mma is exact, and the dot is the exact dot, equal to the CPU's.
// The relu, the weight product and the head sum are then the same fp32 operations in the same
// order as CpuOps' (no contraction: __fmul_rn / __fadd_rn), so the scores are equal. D > 9 needs
// the block scales of a head (q's times the key's) to differ by more than 2^9 across its four
// blocks; the Hadamard rotation spreads each vector's energy evenly over its dims, so in practice
// D is a few units at most. Where D > 9, or for bf16 inputs that were not QAT'd, a dot may differ
// from the CPU's in its last bits; tests/ops/test_indexer_cuda counts how often.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16 operands; lane = 4 g + c, g = lane / 4,
// c = lane % 4; each .b32 register holds two bf16, the lower column/row in the low half):
//   A (16 x 16, row-major; our rows = heads, columns = dh):
//     a0 = A[g][2c, 2c+1]   a1 = A[g+8][2c, 2c+1]   a2 = A[g][2c+8, 2c+9]   a3 = A[g+8][2c+8, 2c+9]
//   B (16 x 8, K x N "col"; B[k][n] = key n's dim k, so a key's dims are contiguous):
//     b0 = B[2c, 2c+1][g] = key g dims 2c, 2c+1      b1 = key g dims 2c+8, 2c+9
//   C/D (16 x 8 fp32): d0, d1 = C[g][2c, 2c+1]   d2, d3 = C[g+8][2c, 2c+1]
// ldmatrix.x4 loads four 8x8 b16 matrices; lane L gives the address of row L % 8 of matrix
// L / 8, and register r of lane (g, c) receives matrix r's row g, columns 2c and 2c+1. So:
//   A at k-step s: matrix r = rows 8(r & 1) + 0..7, dims 16s + 8(r >> 1) + 0..7 gives a_r above;
//     lane L points at head row 16w + L % 8 + 8((L / 8) & 1), dim 16s + 8(L / 16).
//   B for n-tiles 2p, 2p+1 at k-step s: matrix r = keys 16p + 8(r >> 1) + 0..7, dims
//     16s + 8(r & 1) + 0..7: registers 0, 1 are b0, b1 of n-tile 2p, registers 2, 3 of 2p + 1;
//     lane L points at key 16p + L % 8 + 8(L / 16), dim 16s + 8((L / 8) & 1).
// Shared rows are padded to 272 bytes (136 bf16): the 8 rows of an ldmatrix matrix then start
// at 16-byte offsets 0, 16, ..., 112 modulo 128, so each matrix reads all 32 banks once.
#include "kernels/indexer/indexer_mma_scores.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/attention/pack_entries.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"
#include "kernels/sm_count.h"

namespace dsv4::kernels {
namespace {

constexpr int kDh = static_cast<int>(kIndexerMmaHeadDim);
constexpr int kMaxWarps = static_cast<int>(kIndexerMmaMaxHeads) / 16;  // one 16-row MMA tile each
constexpr int kKSteps = kDh / 16;         // mma k-steps per dot
constexpr int kKeyTile = 64;              // keys per pipeline stage
constexpr int kNTiles = kKeyTile / 8;     // mma n-tiles per key tile
constexpr int kPitch = kDh + 8;           // bf16 per shared row of q or keys (272 bytes)
constexpr int kTermPitch = kKeyTile + 8;  // floats per shared row of terms (see the epilogue)
constexpr int kChunksPerRow = kDh * 2 / 16;  // 16-byte cp.async pieces of a row
constexpr int kCtasPerSm = 4;             // CTAs a launch aims for per SM (4 x 54 KB of shared memory fit)

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Bytes of the region that holds the queries until they are in registers, then the terms.
__host__ __device__ constexpr size_t query_or_term_bytes(int rows) {
  constexpr size_t query_row = sizeof(uint16_t) * kPitch, term_row = sizeof(float) * kTermPitch;
  return (query_row > term_row ? query_row : term_row) * static_cast<size_t>(rows);
}

// With packed keys (kv/packed_entries.h's MXFP4 keys), a stage's keys as copied from their pages
// (64 code bytes and 4 scale bytes each, in 4-byte pieces: the alignment every key has), before
// unpack_keys turns them into bf16 rows.
struct PackedKeys {
  uint8_t codes[kKeyTile][Mxfp4KeyLayout::kCodeBytes];
  uint8_t scales[kKeyTile][Mxfp4KeyLayout::kScaleBytes];
};

// Stages of bf16 keys: two, filled by cp.async while the other is read; with packed keys one,
// which each tile's keys are unpacked into once the tile before has read it (their copies go to
// two packed stages instead): 45 KB of shared memory a CTA with 64 heads against 54 KB for bf16
// keys, where two bf16 stages beside the packed ones (62 KB) fit three CTAs an SM instead of
// the four the launch plans for (docs/PERF.md session 39).
__host__ __device__ constexpr int key_stages(bool packed) { return packed ? 1 : 2; }

// Each key's pool row (-1: none) of a copy stage, [2][kKeyTile]: found a tile before the stage's
// copies are issued, a key a thread (its block table load and division under a tile's MMAs), so
// that the copies' 16 threads a key need no lookup of their own (ncu: 8 divisions and dependent
// table loads a thread a tile were a quarter of an 8k prefill launch's stalls, docs/PERF.md
// session 48), nor do the head sums (session 40).
constexpr size_t kKeyRowBytes = 2 * kKeyTile * sizeof(int64_t);

// Shared memory of a CTA with `rows` MMA rows, in bytes, in the order the kernel lays it out.
constexpr size_t smem_bytes_for_rows(int rows, bool packed) {
  return query_or_term_bytes(rows) + sizeof(uint16_t) * key_stages(packed) * kKeyTile * kPitch +
         sizeof(float) * rows + (packed ? 2 * sizeof(PackedKeys) : 0) + kKeyRowBytes;
}

// Grid: x = token, y = one of gridDim.y ranges of whole key tiles that split the token's visible
// keys. Block: 32 x ceil(heads / 16) threads. Packed: the keys are MXFP4 keys, copied into a
// packed stage and unpacked into the one stage of bf16 rows when their tile begins.
template <bool Packed>
__global__ void __launch_bounds__(kMaxWarps * 32) mma_score_kernel(IndexerTopkParams p) {
  pdl_wait();
  extern __shared__ __align__(16) unsigned char smem[];
  const int warps = static_cast<int>(blockDim.x / 32), rows = 16 * warps;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  // [rows][kPitch] the token's queries (rows >= heads zero) until they are in registers, then
  // [rows][kTermPitch] the terms of a key tile; then [key_stages][kKeyTile][kPitch] stages of keys
  // and [rows] w * weight_scale (0 for rows >= heads), then (Packed) the two packed stages and the
  // stages' key rows (kKeyRowBytes). Every offset is a multiple of 16 bytes.
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem);
  float* term_s = reinterpret_cast<float*>(smem);
  uint16_t* key_s = reinterpret_cast<uint16_t*>(smem + query_or_term_bytes(rows));
  float* w_s = reinterpret_cast<float*>(key_s + key_stages(Packed) * kKeyTile * kPitch);
  auto* packed_s = reinterpret_cast<PackedKeys*>(w_s + rows);  // [2] stages, with Packed
  // [2][kKeyTile]: the pool rows of the copy stage's keys (the rows stage, or the packed one).
  auto* key_row_s = reinterpret_cast<int64_t*>(packed_s + (Packed ? 2 : 0));

  const int64_t t = blockIdx.x;
  const IndexerSeqDesc seq = p.seqs[p.seq_of_token[t]];
  const int64_t visible = (p.positions[t] + 1) / p.ratio;
  // The token's visible keys in gridDim.y ranges of whole tiles (the split never changes a score).
  const int64_t visible_tiles = (visible + kKeyTile - 1) / kKeyTile;
  const int64_t keys_per_cta = kKeyTile * ((visible_tiles + gridDim.y - 1) / gridDim.y);
  const int64_t key_begin = static_cast<int64_t>(blockIdx.y) * keys_per_cta;
  const int64_t key_end = min(visible, key_begin + keys_per_cta);
  if (key_begin >= key_end) return;  // the same for every thread of the CTA
  const int heads = static_cast<int>(p.heads);
  const auto* q = static_cast<const uint16_t*>(p.q.data) + t * p.heads * kDh;
  const auto* keys = static_cast<const uint16_t*>(seq.keys.data);

  // Stage `stage`'s key rows for the tile from tile_begin: thread i finds keys i, i + blockDim.x,
  // ... (the keys the head sums' thread i reads the rows of), -1 at or past key_end.
  auto find_key_rows = [&](int stage, int64_t tile_begin) {
    for (int r = static_cast<int>(threadIdx.x); r < kKeyTile; r += static_cast<int>(blockDim.x)) {
      const int64_t j = tile_begin + r;
      key_row_s[stage * kKeyTile + r] = j < key_end ? pool_row(seq.key_pages, j) : -1;
    }
  };
  // Keys [tile_begin, tile_begin + kKeyTile) into a stage, each from its pool row (found by
  // find_key_rows); rows at or past key_end and keys without a pool row become zero (their source
  // address is the token's queries, which are valid, but nothing is read).
  // Packed: the keys' code and scale bytes, zeros for absent ones (which unpack to zero rows).
  auto stage_keys = [&](int stage, int64_t tile_begin) {
    if constexpr (Packed) {
      using L = Mxfp4KeyLayout;
      constexpr int kPieces = L::kEntryBytes / 4;  // 16 of codes, then the 4 scale bytes
      const L layout{static_cast<int>(seq.key_pages.page_rows)};
      const auto* pages = static_cast<const uint8_t*>(seq.keys.data);
      PackedKeys& dst = packed_s[stage];
      for (int i = static_cast<int>(threadIdx.x); i < kKeyTile * kPieces; i += static_cast<int>(blockDim.x)) {
        const int r = i / kPieces, piece = i % kPieces;
        const int64_t row = key_row_s[stage * kKeyTile + r];
        const int64_t slot = row >= 0 ? row : 0;  // the address of an absent key is not read
        if (piece < kPieces - 1)
          cp_async4(shared_address(dst.codes[r] + 4 * piece), pages + layout.code_offset(slot) + 4 * piece, row >= 0);
        else
          cp_async4(shared_address(dst.scales[r]), pages + layout.scale_offset(slot), row >= 0);
      }
    } else {
      uint16_t* dst = key_s + stage * kKeyTile * kPitch;
      for (int i = static_cast<int>(threadIdx.x); i < kKeyTile * kChunksPerRow; i += static_cast<int>(blockDim.x)) {
        const int r = i / kChunksPerRow, piece = i % kChunksPerRow;
        const int64_t row = key_row_s[stage * kKeyTile + r];
        cp_async16(dst + r * kPitch + piece * 8, (row >= 0 ? keys + row * kDh : q) + piece * 8, row >= 0);
      }
    }
  };
  // Packed: a stage's copied keys as bf16 rows (decode_mxfp4_key's values) in the one bf16
  // stage, 8 dims a thread step.
  auto unpack_keys = [&](int stage) {
    constexpr int kScaleDims = Mxfp4KeyLayout::kQuantBlock;
    const PackedKeys& src = packed_s[stage];
    uint16_t* dst = key_s;
    for (int i = static_cast<int>(threadIdx.x); i < kKeyTile * kChunksPerRow; i += static_cast<int>(blockDim.x)) {
      const int r = i / kChunksPerRow, piece = i % kChunksPerRow;
      *reinterpret_cast<uint4*>(dst + r * kPitch + piece * 8) =
          e2m1x8_to_bf16x8(*reinterpret_cast<const uint32_t*>(src.codes[r] + 4 * piece),
                           e8m0_value(src.scales[r][piece * 8 / kScaleDims]));
    }
  };

  for (int i = static_cast<int>(threadIdx.x); i < rows * kChunksPerRow; i += static_cast<int>(blockDim.x)) {
    const int r = i / kChunksPerRow, piece = i % kChunksPerRow;
    const bool valid = r < heads;
    cp_async16(q_s + r * kPitch + piece * 8, q + (valid ? r : 0) * kDh + piece * 8, valid);
  }
  for (int r = static_cast<int>(threadIdx.x); r < rows; r += static_cast<int>(blockDim.x))
    w_s[r] = r < heads ? __fmul_rn(load_float(p.weights, t * p.heads + r), p.weight_scale) : 0.0f;
  find_key_rows(0, key_begin);
  find_key_rows(1, key_begin + kKeyTile);
  __syncthreads();  // the first two tiles' key rows
  stage_keys(0, key_begin);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // This warp's A fragments (head rows 16 warp .. 16 warp + 15) for every k-step, kept for all tiles.
  const int mat = lane / 8, mat_row = lane % 8;
  uint32_t a[kKSteps][4];
  const uint16_t* a_src = q_s + (16 * warp + mat_row + 8 * (mat & 1)) * kPitch + 8 * (mat >> 1);
#pragma unroll
  for (int s = 0; s < kKSteps; ++s) ldmatrix_x4(a[s], a_src + 16 * s);
  const int g = lane / 4, c = lane % 4;
  const int row_lo = 16 * warp + g, row_hi = row_lo + 8;  // the accumulator rows of this lane
  const float w_lo = w_s[row_lo], w_hi = w_s[row_hi];
  __syncthreads();  // every warp has its queries: the region becomes term_s
  const int b_offset = (mat_row + 8 * (mat >> 1)) * kPitch + 8 * (mat & 1);

  float* score_row = p.scores + t * p.score_stride;
  const int64_t tiles = (key_end - key_begin + kKeyTile - 1) / kKeyTile;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int stage = static_cast<int>(tile & 1);
    const int64_t tile_begin = key_begin + tile * kKeyTile;
    if constexpr (Packed) {
      // Its copy landed, and the previous tile's MMAs read the bf16 stage, before the barrier
      // that closed the previous tile.
      unpack_keys(stage);
      __syncthreads();
    }
    // The other stage (packed: the other packed stage, unpacked by the previous tile) was last
    // read before the __syncthreads closing the previous tile.
    if (tile + 1 < tiles) stage_keys(stage ^ 1, tile_begin + kKeyTile);
    cp_async_commit();

    float acc[kNTiles][4];
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    const uint16_t* b_src = key_s + (Packed ? 0 : stage) * kKeyTile * kPitch + b_offset;
#pragma unroll
    for (int s = 0; s < kKSteps; ++s) {
#pragma unroll
      for (int pair = 0; pair < kNTiles / 2; ++pair) {
        uint32_t b[4];
        ldmatrix_x4(b, b_src + 16 * pair * kPitch + 16 * s);
        mma_bf16(acc[2 * pair], a[s], b[0], b[1]);
        mma_bf16(acc[2 * pair + 1], a[s], b[2], b[3]);
      }
    }

    // Terms (w[h] * weight_scale) * relu(q.k) as CpuOps forms them. Lane (g, c) holds keys
    // 8n + 2c, 8n + 2c + 1 of rows row_lo and row_hi; as float2 stores, a half-warp touches words
    // 72 g + 8n + 2c (+1) for 4 consecutive g: 72 = 8 mod 32 puts them in 32 distinct banks.
    // The previous tile's head sums read term_s before the __syncthreads closing that tile.
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      const int col = 8 * n + 2 * c;
      *reinterpret_cast<float2*>(term_s + row_lo * kTermPitch + col) =
          make_float2(__fmul_rn(w_lo, fmaxf(acc[n][0], 0.0f)), __fmul_rn(w_lo, fmaxf(acc[n][1], 0.0f)));
      *reinterpret_cast<float2*>(term_s + row_hi * kTermPitch + col) =
          make_float2(__fmul_rn(w_hi, fmaxf(acc[n][2], 0.0f)), __fmul_rn(w_hi, fmaxf(acc[n][3], 0.0f)));
    }
    __syncthreads();
    // The head sum of each key, in head order (consecutive threads read consecutive words).
    for (int n = static_cast<int>(threadIdx.x); n < kKeyTile; n += static_cast<int>(blockDim.x)) {
      const int64_t j = tile_begin + n;
      if (j >= key_end) break;
      float sum = 0.0f;
      for (int h = 0; h < heads; ++h) sum = __fadd_rn(sum, term_s[h * kTermPitch + n]);
      score_row[j] = isnan(sum) || key_row_s[stage * kKeyTile + n] < 0 ? -INFINITY : sum;
    }
    // This stage's rows, which only this thread's sums above read, for the tile after next (its
    // copies go out at the next tile's start, past the barrier below).
    if (tile + 2 < tiles) find_key_rows(stage, tile_begin + 2 * kKeyTile);
    cp_async_wait<0>();  // the next tile's keys, staged by this thread
    __syncthreads();      // ... and by every thread; term_s and this stage are free again
  }
}

}  // namespace

size_t indexer_mma_scores_smem_bytes(int64_t heads, bool packed_keys) {
  const int warps = static_cast<int>((heads + 15) / 16);
  return smem_bytes_for_rows(16 * warps, packed_keys);
}

void indexer_mma_scores(const IndexerTopkParams& p, cudaStream_t stream) {
  if (p.dh != kIndexerMmaHeadDim || p.heads < 1 || p.heads > kIndexerMmaMaxHeads)
    throw UsageError("indexer_mma_scores: heads=" + std::to_string(p.heads) + " dh=" + std::to_string(p.dh) +
                     ", the tensor-core kernel takes dh=" + std::to_string(kIndexerMmaHeadDim) + " and 1.." +
                     std::to_string(kIndexerMmaMaxHeads) + " heads");
  if (!p.q.bf16 || reinterpret_cast<uintptr_t>(p.q.data) % 16 != 0)
    throw UsageError("indexer_mma_scores: q must be bf16 and 16-byte aligned");
  if (p.tokens <= 0 || p.score_stride <= 0) return;
  if (p.tokens > 0x7fffffff)
    throw UsageError("indexer_mma_scores: " + std::to_string(p.tokens) + " tokens, at most 2^31 - 1 per launch");

  const int sms = current_device_sm_count();
  // Split each token's keys into as many ranges as it takes to give the GPU kCtasPerSm CTAs per
  // SM (decode), down to one range per token when the tokens alone fill it (prefill).
  const int64_t max_tiles = (p.score_stride + kKeyTile - 1) / kKeyTile;
  const int64_t wanted_ctas = static_cast<int64_t>(kCtasPerSm) * sms;
  const int64_t ranges = std::min(max_tiles, std::max<int64_t>(1, (wanted_ctas + p.tokens - 1) / p.tokens));
  const int64_t grid_y = std::min<int64_t>(ranges, 65535);

  const int warps = static_cast<int>((p.heads + 15) / 16);
  const size_t smem = indexer_mma_scores_smem_bytes(p.heads, p.packed_keys);
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(grid_y));
  const auto launch = [&](auto kernel) {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch_pdl(kernel, grid, 32 * warps, smem, stream, p);
  };
  if (p.packed_keys) launch(mma_score_kernel<true>);
  else launch(mma_score_kernel<false>);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
