// fp8_mma_gemm's kF16Wgmma: the staged kernel's arithmetic (fp8_mma_gemm.h's summation order) on
// Hopper's fp16 WGMMA, fed by TMA, for prefill-sized dense GEMMs and the routed experts' grouped
// GEMMs of MXFP4 weights; and the same dense kernel on FP8 WGMMAs for kWgmmaFp8's dense calls.
//
// Why a kernel of its own. The staged kernel converts e4m3 codes to fp16 in every warp's MMA
// loop and copies tiles with cp.async from every thread; ncu showed those instructions, not the
// tensor cores, bound it (~290 TFLOP/s, docs/PERF.md sessions 10-11), and a WGMMA kernel over
// the same tiles, which still converted in its loop, was no faster. Here both operands are
// converted once per call into fp16 (e4m3_to_f16_mma_order: exact values, each 128-wide K block
// re-laid so that the 16 K positions of MMA step s hold what the other kernels' step s holds in
// the same positions), so the loop only waits for TMA copies, issues WGMMAs and adds each K
// block's sum into the running sums: the conversions cost a pass over the weight (act_quant
// writes x's fp16 values itself; 3.8 ms of an 8k prefill's 151 ms of these GEMMs) instead of work
// in every CTA.
//
// The bits: wgmma.m64n128k16 f32 += f16 x f16 sums a k16 step as mma.sync.m16n8k16 does (session
// 10's f16 WGMMA kernel gave the staged kernel's bits on 36 tests), each output's eight steps of a
// block run in the same order from a zeroed accumulator, and the block sums go through the same
// fmaf into four lanes walked pass by pass (staged_tiles.cuh) and the same three additions.
//
// A CTA: 128 weight rows x 128 x rows, two consumer warpgroups (weight rows 64 wg .. 64 wg + 63
// against all 128 x rows) and a producer warpgroup, one lane of which issues the TMA copies, so
// that no consumer waits on the copies' behalf (thread 0 of the consumers issuing them, the kernel
// was 1.5-2x slower). Full barriers (TMA's transaction counts) say a stage landed, empty barriers
// (one arrival per consumer warp) that every consumer is done with it. Each consumer thread keeps
// three sets of 64 fp32 registers: the block's sum, its pass's lane sum and the running sum of the
// passes, which setmaxnreg makes room for by taking the producer's registers (a producer warp
// alone, 288 threads, capped ptxas at 168 registers a thread and spilled). The grid is persistent
// (a CTA an SM, taking tiles in turn, so that the next tile's first copies overlap a tile's last
// blocks and its stores); tiles are rasterised in groups of kRasterGroup x tiles, so that the CTAs
// at work share a few x tiles and weight tiles in L2.
//
// Dense e4m3 weights (f16_wgmma_dense_kernel): a stage is half a K block (64 K: one 128-byte
// swizzled row per operand row, as TMA's 128-byte swizzle and the WGMMA descriptor agree on) of
// both operands, and the block's 128 x scales with its second half; kDenseStages stages keep
// three blocks in flight. Its kBf16 form takes bf16 operands without x scales for the GEMMs of
// bf16 activations at prefill sizes (wo_a's grouped x FP8 weight, whose 128-row weight tiles each
// read their group's columns of x, and the bf16 linears), both operands re-laid by
// to_bf16_mma_order_kernel in the same K order as the fp16 ones, so each k16 step sums what the
// staged mma.sync kernels' step sums.
//
// Grouped e2m1 weights (f16_wgmma_e2m1_kernel; the routed experts at prefill): a tile is one of
// the plan's x tiles (one expert's rows) against 128 rows of that expert's weight, its MMAs (and
// the x rows it copies) only as wide as its rows rounded up to 32 (grouped_item_columns). A per-call fp16
// copy of all experts' weights would be 13 GB a layer (tried: the 8k prefill took 2.5 s), so the
// weight is converted in the kernel, by the consumers into their WGMMAs' A registers: lane (g, t)
// of a warp needs, for MMA step s, inputs 32 t + 4 s .. 32 t + 4 s + 3 of its rows g and g + 8
// (K position 16 s + 2 t + (i % 2) + 8 (i / 2) holds input 32 t + 4 s + i, fp8_mma_gemm.h), which
// are slots 2 (s % 2) and 2 (s % 2) + 1 of word s / 2 of the row's group t in e2m1_mma_order's
// layout: one 16-byte load a row gives a lane its whole block. A stage is a whole K block: x (two
// 64-K TMA boxes), the 128 weight rows' e2m1 codes and shifts, which the producer warpgroup's
// thread `row` copies with cp.async and announces on the stage's full barrier as they land, and
// the block's scale factors of the 128 x rows (weight scale x x scale, the product the consumers'
// fmaf takes), which thread `row` computes for x row `row`. Session 22's kernel converted in the
// producer warpgroup into an fp16 w tile; ncu (session 24) showed those 128 threads, one warp a
// scheduler, bounding it while the consumers waited for their tiles. The factors come multiplied
// so that the consumers' per-block work is the fmaf alone (no global load of the weight scale).
//
// The chained order (kChainedBf16Wgmma, fp8_mma_gemm.h; the same kernel with kChained): x comes
// as bf16 values with their scales folded in, the consumers convert the weight into bf16 with its
// shift and block scale folded in (e2m1_slot_to_bf16x2), and each pass is one bf16 WGMMA
// accumulation over its blocks (consume_chained_item): no block sum, no fmaf, no wait for a
// block's MMAs before the next block's are issued. The producers copy the same tiles and put the
// block's weight scale where the factors were.
#include "kernels/gemm/f16_wgmma_gemm.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/bf16_cast.cuh"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
#include "kernels/gemm/e2m1_fp16.cuh"
#include "kernels/gemm/e2m1_layout.h"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/gemm/staged_tiles.cuh"
#include "kernels/gemm/wgmma.cuh"
#include "kernels/launch.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/sm_count.h"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 8;                   // two consumer warpgroups
constexpr int kThreads = kWarps * 32 + 128;  // and the producer warpgroup
constexpr int kTileRows = 128;  // weight rows and x rows of a CTA
constexpr int kBoxK = 64;       // K of a TMA box: 128 bytes of fp16 a row
constexpr int kOperandBytes = kTileRows * kBoxK * 2;
constexpr int kRasterGroup = 8;

// Dense: a stage is half a K block, [w][x][x scales (512 B, padded: tiles stay 1024-aligned)].
constexpr int kDenseStages = 6;
constexpr int kDenseScaleBytes = kTileRows * 4;
constexpr int kDenseStageBytes = 2 * kOperandBytes + 1024;

// FP8 (kWgmmaFp8's dense calls): a stage is a K block, [w][x][x scales (512 B, padded)], each
// operand tile 128 rows of 128 e4m3 codes.
constexpr int kFp8Stages = 6;
constexpr int kFp8TileBytes = kTileRows * 128;
constexpr int kFp8StageBytes = 2 * kFp8TileBytes + 1024;

// E2M1: a stage is a K block, [x (two boxes)][codes][shifts][the block's scale factors of the 128
// x rows], 1024-aligned.
constexpr int kE2m1Stages = 5;
constexpr int kCodesRowBytes = 64;  // a weight row's e2m1 codes of a K block: groups t = 0..3 of 16 bytes
constexpr int kE2m1Codes = 2 * kOperandBytes;
constexpr int kE2m1Shifts = kE2m1Codes + kTileRows * kCodesRowBytes;
constexpr int kE2m1Factors = kE2m1Shifts + kTileRows * 4;
constexpr int kE2m1StageBytes = (kE2m1Factors + 4 * kTileRows + 1023) / 1024 * 1024;

// Shared memory: the stages, then the full and empty barriers, + 1024 for the alignment.
constexpr int shared_bytes(int stages, int stage_bytes) { return 1024 + stages * stage_bytes + 2 * stages * 8; }
static_assert(shared_bytes(kDenseStages, kDenseStageBytes) <= 227 * 1024 &&
                  shared_bytes(kFp8Stages, kFp8StageBytes) <= 227 * 1024 &&
                  shared_bytes(kE2m1Stages, kE2m1StageBytes) <= 227 * 1024,
              "f16_wgmma_gemm's shared memory exceeds Hopper's 227 KiB");

// setmaxnreg's registers a thread: the producer warpgroup gives up what the consumers take. A CTA
// holds kThreads x 168 registers (ptxas's cap for 384 threads), and a setmaxnreg.inc that asks for
// more than the CTA holds waits for ever (80 / 216 hung: PERF.md session 21), so the two must fit
// in it. Both producers only copy.
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
static_assert(128 * kProducerRegisters + kWarps * 32 * kConsumerRegisters <= kThreads * 168,
              "f16_wgmma_gemm: setmaxnreg asks for more registers than the CTA holds");

struct F16WgmmaArgs {
  const float* w_scale = nullptr;  // dense
  int64_t w_scale_ld = 0;
  MutFloatPtr y;
  int64_t ldy = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t m_tiles = 0;  // dense: x tiles of 128 rows; grouped: read from *tile_count
  int64_t n_tiles = 0;
  int kblocks = 0;
  // Grouped (E2M1 kernel): tile t covers tiles[t] with group tiles[t].group's e2m1 weight; x's
  // scales are read by the producers (the dense kernel's come by TMA).
  const float* x_scale = nullptr;
  int64_t x_scale_ld = 0;
  const Fp8MmaTile* tiles = nullptr;
  const int32_t* tile_count = nullptr;
  const uint8_t* const* group_w = nullptr;
  const uint8_t* const* group_w_shift = nullptr;
  const float* const* group_w_scale = nullptr;
  // Grouped dense rows (wo_a): the weight rows of a group; x's columns for weight row n start at
  // n / group_rows * k (0: one group, x's columns from 0).
  int64_t group_rows = 0;
};

// A work item of a CTA: 128 weight rows from n0 against x rows [m0, m0 + rows) (grouped: of one
// group's weight).
struct WorkItem {
  int64_t m0 = 0, n0 = 0;
  int rows = 0;
  int group = 0;
};

// The CTA's items are blockIdx.x + i gridDim.x of the m_tiles x n_tiles, in groups of
// kRasterGroup x tiles, n tiles outermost within a group.
struct ItemWalk {
  int64_t m_tiles = 0, my_items = 0;
};

__device__ __forceinline__ ItemWalk item_walk(const F16WgmmaArgs& a, bool grouped) {
  ItemWalk w;
  w.m_tiles = grouped ? *a.tile_count : a.m_tiles;
  const int64_t items = w.m_tiles * a.n_tiles;
  w.my_items = items > blockIdx.x ? (items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  return w;
}

template <bool kGrouped>
__device__ __forceinline__ WorkItem item_at(const F16WgmmaArgs& a, const ItemWalk& walk, int64_t i) {
  const int64_t id = blockIdx.x + i * gridDim.x, per_group = kRasterGroup * a.n_tiles;
  const int64_t first_m = id / per_group * kRasterGroup, in_group = id % per_group;
  const int64_t group_m = min(walk.m_tiles - first_m, static_cast<int64_t>(kRasterGroup));
  const int64_t m_tile = first_m + in_group % group_m;
  WorkItem item;
  item.n0 = in_group / group_m * kTileRows;
  if constexpr (kGrouped) {
    const Fp8MmaTile tile = a.tiles[m_tile];
    item.m0 = tile.row_begin;
    item.rows = tile.rows;
    item.group = tile.group;
  } else {
    item.m0 = m_tile * kTileRows;
    item.rows = static_cast<int>(min(static_cast<int64_t>(kTileRows), a.m - item.m0));
  }
  return item;
}

// The box of `map` at (inner, outer) into shared memory at dst, completing on barrier bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap& map, int inner, int outer, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
}

// The kernels' shared memory, aligned by an offset from the shared array itself, so that the
// compiler knows the pointer is shared memory (LDS / STS: through an integer cast it issued
// generic accesses), and its barriers: `stages` full ones, then as many empty ones.
struct SharedStages {
  uint8_t* smem;
  uint32_t smem0, full0, empty0;
};

__device__ __forceinline__ SharedStages shared_stages(uint8_t* raw, int stages, int stage_bytes) {
  SharedStages s;
  s.smem = raw + (1024u - shared_address(raw) % 1024u) % 1024u;
  s.smem0 = shared_address(s.smem);
  s.full0 = s.smem0 + static_cast<uint32_t>(stages * stage_bytes);
  s.empty0 = s.full0 + static_cast<uint32_t>(stages * 8);
  return s;
}

// The e2m1 kernel's two consumer warpgroups take turns issuing a K block's WGMMAs, each then
// waiting for its own and adding the block's sums into its lane sums while the other's WGMMAs run.
// Issued together (both wait for the same stage), their WGMMAs ended together and both adding
// phases left the tensor cores idle (turns: an 8k prefill's routed experts -3%, docs/PERF.md
// session 41; the dense kernel, bound by its copies, gained nothing). Named barrier turn_of(w) lets
// warpgroup w issue: the other warpgroup arrives on it once its own block's WGMMAs are issued.
// Warpgroup 0 goes first, so warpgroup 1 arrives once more than warpgroup 0 waits; finish() takes
// that arrival. Each warpgroup's arithmetic is unchanged: only the order the two issue in is. A
// warpgroup that never acquires (the dense kernel's) never waits.
struct TensorTurns {
  static __device__ __forceinline__ int turn_of(int w) { return 1 + w; }  // named barriers 1, 2 (0: __syncthreads)
  static constexpr int kConsumerThreads = kWarps * 32;
  int wg;
  bool issued = false;  // this warpgroup has issued a block

  __device__ __forceinline__ void acquire() const {
    if (wg == 1 || issued) asm volatile("bar.sync %0, %1;\n" ::"r"(turn_of(wg)), "n"(kConsumerThreads) : "memory");
  }
  __device__ __forceinline__ void release() {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(turn_of(1 - wg)), "n"(kConsumerThreads) : "memory");
    issued = true;
  }
  __device__ __forceinline__ void finish() const {
    if (wg == 0 && issued) asm volatile("bar.sync %0, %1;\n" ::"r"(turn_of(0)), "n"(kConsumerThreads) : "memory");
  }
};

// The columns (x rows) of a grouped item that its MMAs cover: its rows rounded up to 32. An
// expert's last tile is partly empty, and so is every tile of an expert with few rows (an 8k
// prefill's experts have ~192 rows, a 2k prefill's ~48): their MMAs and the x rows they copy
// shrink with it. Dense items cover 128.
__device__ __forceinline__ int grouped_item_columns(int rows) {
  return rows <= 32 ? 32 : rows <= 64 ? 64 : rows <= 96 ? 96 : kTileRows;
}

// A consumer thread's 64 sums of an item (the m64n128 accumulator layout of its warpgroup's 64
// weight rows: x row 8 j + 2 t + (c & 1), weight row g or g + 8 of its warp's 16) into y, those
// inside the item's rows and n. The thread's values lie in y's columns n and n + 8 of rows
// 2 t + 8 j and the next, so each is a store of its own; what the stores cost is the work around
// them. ncu found this epilogue holding 42% of the FP8 dense kernel's stall samples and 40% of its
// instructions at wq_b's shape (32768 x 1024, 8,192 rows; docs/PERF.md session 46), ~21
// instructions a value: the dtype tested, bounds and a 64-bit address computed and the software
// bf16 rounding, each value apart. Here the dtype and the columns' bounds are tested once, a row
// pointer moves 8 rows a step, and two rows' values round in one hardware conversion, which gives
// float_to_bf16's bits for all but NaNs (kernels/bf16_cast.cuh): a thread whose sums hold a NaN or
// an infinity (v x 0 is NaN for those alone) rounds each value by float_to_bf16 instead. Staging the
// values in shared memory for 16-byte stores halved the instructions again but was slower
// (session 46: each 16-row chunk's write, warp sync, read and store ran as a dependent chain,
// where these stores are independent).
__device__ __forceinline__ void store_item_sums(const F16WgmmaArgs& a, const WorkItem& item,
                                                const float (&sums)[kWgmmaN128Accumulators]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n = item.n0 + 16 * warp + g;  // the thread's weight rows n and n + 8 (16 warp = 64 wg + 16 warp in wg)
  const bool n0_in = n < a.n, n8_in = n + 8 < a.n;
  const int64_t first = (item.m0 + 2 * t) * a.ldy + n, step = 8 * a.ldy;
  const int rows = item.rows - 2 * t;  // the item's rows from the thread's first
  if (!a.y.bf16) {
    float* y = static_cast<float*>(a.y.data) + first;
#pragma unroll
    for (int j = 0; j < 16; ++j, y += step) {
      const bool row0 = 8 * j < rows, row1 = 8 * j + 1 < rows;
      if (row0 & n0_in) y[0] = sums[4 * j];
      if (row0 & n8_in) y[8] = sums[4 * j + 2];
      if (row1 & n0_in) y[a.ldy] = sums[4 * j + 1];
      if (row1 & n8_in) y[a.ldy + 8] = sums[4 * j + 3];
    }
    return;
  }
  float probe[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // NaN iff a sum is NaN or infinite
#pragma unroll
  for (int r = 0; r < kWgmmaN128Accumulators; ++r) probe[r % 4] = fmaf(sums[r], 0.0f, probe[r % 4]);
  uint16_t* y = static_cast<uint16_t*>(a.y.data) + first;
  if (isnan(probe[0] + probe[1] + probe[2] + probe[3])) {
#pragma unroll
    for (int j = 0; j < 16; ++j, y += step) {
      const bool row0 = 8 * j < rows, row1 = 8 * j + 1 < rows;
      if (row0 & n0_in) y[0] = float_to_bf16(sums[4 * j]);
      if (row0 & n8_in) y[8] = float_to_bf16(sums[4 * j + 2]);
      if (row1 & n0_in) y[a.ldy] = float_to_bf16(sums[4 * j + 1]);
      if (row1 & n8_in) y[a.ldy + 8] = float_to_bf16(sums[4 * j + 3]);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 16; ++j, y += step) {
    const uint32_t col0 = float2_to_bf16x2_unless_nan(sums[4 * j], sums[4 * j + 1]);  // rows 8 j, 8 j + 1 of column n
    const uint32_t col8 = float2_to_bf16x2_unless_nan(sums[4 * j + 2], sums[4 * j + 3]);
    const bool row0 = 8 * j < rows, row1 = 8 * j + 1 < rows;
    if (row0 & n0_in) y[0] = static_cast<uint16_t>(col0);
    if (row0 & n8_in) y[8] = static_cast<uint16_t>(col8);
    if (row1 & n0_in) y[a.ldy] = static_cast<uint16_t>(col0 >> 16);
    if (row1 & n8_in) y[a.ldy + 8] = static_cast<uint16_t>(col8 >> 16);
  }
}

constexpr int kPasses = 4;  // staged_block_at's walk: blocks 0, 4, ..; 1, 5, ..; 2, ..; 3, ..

// The consumers' walk over the CTA's items: per item, kPasses passes over its K blocks b = pass,
// pass + kPasses, ... (staged_tiles.cuh's order), which the producers' copies follow. Block b's
// sums come in two calls: issue(blk, item, b) starts its MMAs into blk (the dense kernel waits for
// its stages and issues its WGMMAs, whose first overwrites blk; the grouped kernel's MMAs start in
// finish, and its blk is zeroed and fenced here, all 128 columns whatever an item's MMAs cover:
// before the wait for the stage, this costs nothing), and finish(blk, q, item, b, turns) completes
// them and adds them, scaled by the block's weight scale and x's scales, into the pass's lane sums
// q. The passes' sums add in order into `sum`. The dense kernel stores them once the next item's
// first block is issued: its MMAs then run under the stores, where the tensor cores idled while a
// CTA stored (the sums stay in `sum` until the next item's first pass ends; an MMA in flight across
// the loop's back edge made ptxas wait for every WGMMA, C7514, so the store moves into the next
// iteration instead). The grouped kernel stores at the item's end: its MMAs start in finish, and
// `sum` held longer spilled.
template <bool kGrouped, class Issue, class Finish>
__device__ __forceinline__ void consume_items(const F16WgmmaArgs& a, const ItemWalk& walk, Issue&& issue,
                                              Finish&& finish) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters) : "memory");
  TensorTurns turns{static_cast<int>(threadIdx.x / 128)};
  float sum[kWgmmaN128Accumulators], q[kWgmmaN128Accumulators], blk[kWgmmaN128Accumulators];
  WorkItem stored_next;  // dense: the item whose sums `sum` holds, once i > 0
  for (int64_t i = 0; i < walk.my_items; ++i) {
    const WorkItem item = item_at<kGrouped>(a, walk, i);
    if constexpr (!kGrouped) {  // block 0's MMAs, then the last item's stores under them
      issue(blk, item, 0);
      if (i > 0) store_item_sums(a, stored_next, sum);
    }
    for (int pass = 0; pass < kPasses; ++pass) {
#pragma unroll
      for (float& v : q) v = 0.0f;
      for (int b = pass; b < a.kblocks; b += kPasses) {
        if constexpr (kGrouped) {  // the e2m1 MMAs add into zeroed sums (overwriting them spilled)
#pragma unroll
          for (float& v : blk) v = 0.0f;
          fence_accumulators(blk);
        }
        if (kGrouped || b > 0) issue(blk, item, b);
        finish(blk, q, item, b, turns);
      }
#pragma unroll
      for (int r = 0; r < kWgmmaN128Accumulators; ++r) sum[r] = pass == 0 ? q[r] : __fadd_rn(sum[r], q[r]);
    }
    if constexpr (kGrouped) store_item_sums(a, item, sum);
    else stored_next = item;
  }
  if (!kGrouped && walk.my_items > 0) store_item_sums(a, stored_next, sum);
  turns.finish();
}

// The dense kernel's half block `half_block` (a stage): waits for it to land and gives its
// operands' WGMMA descriptors, warpgroup wg's 64 weight rows (a) and the 128 x rows (b).
struct DenseStage {
  uint64_t a, b;
};
__device__ __forceinline__ DenseStage dense_stage(const SharedStages& sh, int half_block, int wg) {
  const int s = half_block % kDenseStages;
  barrier_wait(sh.full0 + 8 * s, static_cast<uint32_t>(half_block / kDenseStages) & 1u);
  const uint32_t stage = sh.smem0 + static_cast<uint32_t>(s * kDenseStageBytes);
  return {wgmma_descriptor(stage + static_cast<uint32_t>(wg * 64 * 128)), wgmma_descriptor(stage + kOperandBytes)};
}

// The chained order's dense consumers (kChainedBf16Wgmma, fp8_mma_gemm.h: bf16 operands with every
// scale folded in): per item, kPasses passes over its K blocks (the producers' walk), each pass one
// WGMMA accumulation over its blocks' k16 steps, then added in pass order into `sum`. A block's two
// half stages are freed once the next block's MMAs are issued and its own are done (a warpgroup
// keeps two blocks in flight); the item's sums are stored once the next item's first block is
// issued, under its MMAs (as consume_items does).
__device__ __forceinline__ void consume_chained_dense_items(const F16WgmmaArgs& a, const ItemWalk& walk,
                                                           const SharedStages& sh) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters) : "memory");
  const int wg = threadIdx.x / 128;
  int step = 0;  // the CTA's half blocks so far: half block `step` sits in stage step % kDenseStages
  float sum[kWgmmaN128Accumulators], acc[kWgmmaN128Accumulators];
  // Block `step / 2`'s WGMMAs into acc, then the previous block's stages freed once its MMAs are done.
  int pending = -1;  // the first half block of the pass's previous block, -1 at a pass's start
  const auto free_pending = [&] {  // one arrival a warp on each of the two stages' empty barriers
    if (pending < 0) return;
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
      barrier_arrive(sh.empty0 + 8 * (pending % kDenseStages));
      barrier_arrive(sh.empty0 + 8 * ((pending + 1) % kDenseStages));
    }
  };
  const auto issue_block = [&] {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const DenseStage stage = dense_stage(sh, step + half, wg);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_m64n128k16_16bit<true>(acc, stage.a + 2 * kk, stage.b + 2 * kk);
      wgmma_commit();
    }
    wgmma_wait<2>();
    free_pending();
    pending = step;
    step += 2;
  };
  const auto start_pass = [&] {
#pragma unroll
    for (float& v : acc) v = 0.0f;
    fence_accumulators(acc);
    pending = -1;
  };
  const auto end_pass = [&](int pass) {
    wgmma_wait_all();
    fence_accumulators(acc);
    free_pending();
#pragma unroll
    for (int r = 0; r < kWgmmaN128Accumulators; ++r) sum[r] = pass == 0 ? acc[r] : __fadd_rn(sum[r], acc[r]);
  };
  WorkItem stored_next;  // the item whose sums `sum` holds, once i > 0
  for (int64_t i = 0; i < walk.my_items; ++i) {
    const WorkItem item = item_at<false>(a, walk, i);
    start_pass();
    issue_block();  // block 0, then the last item's stores under its MMAs
    if (i > 0) store_item_sums(a, stored_next, sum);
    for (int b = kPasses; b < a.kblocks; b += kPasses) issue_block();
    end_pass(0);
    for (int pass = 1; pass < kPasses; ++pass) {
      start_pass();
      for (int b = pass; b < a.kblocks; b += kPasses) issue_block();
      end_pass(pass);
    }
    stored_next = item;
  }
  if (walk.my_items > 0) store_item_sums(a, stored_next, sum);
}

// kBf16: bf16 operands (x and the weight's bf16 values, the MMAs bf16) and no x scales: the
// block's factor is its weight scale alone (1 without weight scales: a plain sum, fmaf(blk, 1, q)
// being blk + q), and scale_map is not read. kChained (with kBf16): the chained order's consumers
// (consume_chained_dense_items) over the same stages.
template <bool kBf16, bool kChained = false>
__global__ void __launch_bounds__(kThreads, 1)
    f16_wgmma_dense_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                           const __grid_constant__ CUtensorMap scale_map, const F16WgmmaArgs a) {
  static_assert(kBf16 || !kChained, "the chained order's operands are bf16");
  pdl_wait();
  extern __shared__ uint8_t f16_wgmma_smem_raw[];
  const SharedStages sh = shared_stages(f16_wgmma_smem_raw, kDenseStages, kDenseStageBytes);
  const ItemWalk walk = item_walk(a, false);
  const int kblocks = a.kblocks, steps = 2 * kblocks;  // an item's half blocks, in the walk's order
  // The CTA's steps run on across its items (step i steps + j is step j of item i), so the copies
  // of an item's first stages overlap the last item's end.
  const int my_steps = static_cast<int>(walk.my_items * steps);  // the host keeps it under 2^31
  init_stage_barriers(sh.full0, sh.empty0, kDenseStages, 1, kWarps);  // empty: an arrival a consumer warp

  if (threadIdx.x >= kWarps * 32) {  // the producer warpgroup: its first lane issues the copies
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters) : "memory");
    if (threadIdx.x != kWarps * 32) return;
    int local = 0;
    int64_t item_i = 0;
    WorkItem item = walk.my_items > 0 ? item_at<false>(a, walk, 0) : WorkItem{};
    // x's first column for the item's weight rows (their group's, for grouped rows).
    const auto x_column = [&] { return a.group_rows > 0 ? static_cast<int>(item.n0 / a.group_rows * a.k) : 0; };
    int x_k0 = x_column();
    for (int step = 0; step < my_steps; ++step) {
      const int s = step % kDenseStages, b = staged_block_at(local / 2, kblocks), half = local % 2;
      if (step >= kDenseStages) barrier_wait(sh.empty0 + 8 * s, static_cast<uint32_t>(step / kDenseStages - 1) & 1u);
      const uint32_t stage = sh.smem0 + static_cast<uint32_t>(s * kDenseStageBytes), full = sh.full0 + 8 * s;
      const int k0 = b * 128 + half * kBoxK;
      const bool scales = !kBf16 && half == 1;
      barrier_expect_bytes(full, 2 * kOperandBytes + (scales ? kDenseScaleBytes : 0));
      tma_load(stage, w_map, k0, static_cast<int>(item.n0), full);
      tma_load(stage + kOperandBytes, x_map, x_k0 + k0, static_cast<int>(item.m0), full);
      if (scales) tma_load(stage + 2 * kOperandBytes, scale_map, static_cast<int>(item.m0), b, full);
      if (++local == steps) {
        local = 0;
        if (++item_i < walk.my_items) {
          item = item_at<false>(a, walk, item_i);
          x_k0 = x_column();
        }
      }
    }
    return;
  }

  if constexpr (kChained) {
    consume_chained_dense_items(a, walk, sh);
    return;
  }
  const int wg = threadIdx.x / 128, t = threadIdx.x % 4;
  int step = 0;
  const auto issue = [&](float (&blk)[kWgmmaN128Accumulators], const WorkItem&, int) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const DenseStage stage = dense_stage(sh, step + half, wg);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)  // MMA step 4 half + kk: 32 bytes of K, the descriptors move 2 x 16 bytes
        if (half + kk == 0) wgmma_m64n128k16_16bit<kBf16, false>(blk, stage.a, stage.b);
        else wgmma_m64n128k16_16bit<kBf16>(blk, stage.a + 2 * kk, stage.b + 2 * kk);
      wgmma_commit();
    }
  };
  consume_items<false>(a, walk, issue,
                          [&](float (&blk)[kWgmmaN128Accumulators], float (&q)[kWgmmaN128Accumulators],
                              const WorkItem& item, int b, TensorTurns&) {
    const float sw = a.w_scale != nullptr ? __ldg(a.w_scale + (item.n0 / kTileRows) * a.w_scale_ld + b) : 1.0f;
    wgmma_wait_all();
    fence_accumulators(blk);
    const int scale_stage = (step + 1) % kDenseStages;
    if constexpr (kBf16)
      add_block_times(q, blk, [&](int) { return make_float2(sw, sw); });
    else
      add_scaled_block(q, blk, reinterpret_cast<const float*>(sh.smem + scale_stage * kDenseStageBytes + 2 * kOperandBytes),
                       sw, t);
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
      barrier_arrive(sh.empty0 + 8 * (step % kDenseStages));
      barrier_arrive(sh.empty0 + 8 * scale_stage);
    }
    step += 2;
  });
}

// The dense FP8 kernel's consumers: each item's K blocks (four wgmma.m64n128k32 e4m3 into a fresh
// accumulator, then q += the block times its scales, blocks in ascending order), with two
// accumulators in turn, so that block b + 1's WGMMAs are issued before the warpgroup
// waits for block b's and adds it: the tensor cores keep a block in flight while the warpgroup
// promotes, where one accumulator left them idle from each wait to the next issue. An item's
// outputs are stored once the next item's first block is issued (consume_items says why there).
// The same instructions and additions in the same order, so the same bits. A stage is freed once
// its block is added (the next block's WGMMAs are then in flight). The accumulators are pinned
// around each issue too: without that, ptxas saw the adds of one accumulator inside the other's
// WGMMAs' pipeline stage and serialised every WGMMA (C7514). No spills.
template <class WeightScale>
__device__ __forceinline__ void consume_fp8_dense_items(const F16WgmmaArgs& a, const ItemWalk& walk,
                                                        const SharedStages& sh, WeightScale&& weight_scale) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters) : "memory");
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, t = lane % 4;
  int j = 0;  // the CTA's blocks so far: block j sits in stage j % kFp8Stages
  const auto issue = [&](float (&acc)[kWgmmaN128Accumulators], int jb) {
    const int s = jb % kFp8Stages;
    barrier_wait(sh.full0 + 8 * s, static_cast<uint32_t>(jb / kFp8Stages) & 1u);
    const uint32_t stage = sh.smem0 + static_cast<uint32_t>(s * kFp8StageBytes);
    const uint64_t desc_a = wgmma_descriptor(stage + static_cast<uint32_t>(wg * 64 * 128));
    const uint64_t desc_b = wgmma_descriptor(stage + kFp8TileBytes);
    fence_accumulators(acc);
    wgmma_e4m3_issue(acc, desc_a, desc_b);
    fence_accumulators(acc);
  };
  float q[kWgmmaN128Accumulators], acc0[kWgmmaN128Accumulators], acc1[kWgmmaN128Accumulators];
  WorkItem stored_next;  // the item whose sums q holds, once i > 0
  for (int64_t i = 0; i < walk.my_items; ++i) {
    const WorkItem item = item_at<false>(a, walk, i);
    float sw0 = weight_scale(item, 0), sw1 = 0.0f;
    issue(acc0, j);
    if (i > 0) store_item_sums(a, stored_next, q);  // under block 0's MMAs
#pragma unroll
    for (float& v : q) v = 0.0f;
    // Block b's WGMMAs are done (its wait came first): q += it times its scales (the weight's, sw,
    // loaded when the block was issued, so that the load's latency hides under the MMAs), and its
    // stage freed.
    const auto add = [&](float (&acc)[kWgmmaN128Accumulators], int b, float sw) {
      fence_accumulators(acc);
      const int s = (j + b) % kFp8Stages;
      add_scaled_block(q, acc, reinterpret_cast<const float*>(sh.smem + s * kFp8StageBytes + 2 * kFp8TileBytes), sw, t);
      __syncwarp();
      if (lane == 0) barrier_arrive(sh.empty0 + 8 * s);
    };
    int b = 0;  // acc0 holds block b (issued)
    for (; b + 2 < a.kblocks; b += 2) {
      sw1 = weight_scale(item, b + 1);
      issue(acc1, j + b + 1);
      wgmma_wait<1>();
      add(acc0, b, sw0);
      sw0 = weight_scale(item, b + 2);
      issue(acc0, j + b + 2);
      wgmma_wait<1>();
      add(acc1, b + 1, sw1);
    }
    if (b + 1 < a.kblocks) {
      sw1 = weight_scale(item, b + 1);
      issue(acc1, j + b + 1);
      wgmma_wait<1>();
      add(acc0, b, sw0);
      wgmma_wait<0>();
      add(acc1, b + 1, sw1);
    } else {
      wgmma_wait<0>();
      add(acc0, b, sw0);
    }
    j += a.kblocks;
    stored_next = item;
  }
  if (walk.my_items > 0) store_item_sums(a, stored_next, q);
}

// fp8_mma_gemm's kWgmmaFp8 for dense calls: the dense kernel's persistent walk, TMA producer and
// consumers on the e4m3 codes as they are (no conversion pass over x or the weight), each K block
// four wgmma.m64n128k32 e4m3 into a fresh accumulator, then added times the block's scales in
// ascending block order (one pass, one lane): the instructions and additions of
// fp8_mma_gemm.cu's fp8_wgmma_gemm_kernel, whose bits these are, with the next block's MMAs in
// flight while a block is added (consume_fp8_dense_items). A stage is a whole K block (128 codes,
// one 128-byte swizzled row per operand row) and the block's 128 x scales.
__global__ void __launch_bounds__(kThreads, 1)
    fp8_wgmma_dense_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                           const __grid_constant__ CUtensorMap scale_map, const F16WgmmaArgs a) {
  pdl_wait();
  extern __shared__ uint8_t f16_wgmma_smem_raw[];
  const SharedStages sh = shared_stages(f16_wgmma_smem_raw, kFp8Stages, kFp8StageBytes);
  const ItemWalk walk = item_walk(a, false);
  const int kblocks = a.kblocks;
  const int my_blocks = static_cast<int>(walk.my_items * kblocks);  // the host keeps it under 2^31
  init_stage_barriers(sh.full0, sh.empty0, kFp8Stages, 1, kWarps);  // empty: an arrival a consumer warp

  if (threadIdx.x >= kWarps * 32) {  // the producer warpgroup: its first lane issues the copies
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters) : "memory");
    if (threadIdx.x != kWarps * 32) return;
    int b = 0;
    int64_t item_i = 0;
    WorkItem item = walk.my_items > 0 ? item_at<false>(a, walk, 0) : WorkItem{};
    for (int j = 0; j < my_blocks; ++j) {
      const int s = j % kFp8Stages;
      if (j >= kFp8Stages) barrier_wait(sh.empty0 + 8 * s, static_cast<uint32_t>(j / kFp8Stages - 1) & 1u);
      const uint32_t stage = sh.smem0 + static_cast<uint32_t>(s * kFp8StageBytes), full = sh.full0 + 8 * s;
      barrier_expect_bytes(full, 2 * kFp8TileBytes + kDenseScaleBytes);
      tma_load(stage, w_map, b * 128, static_cast<int>(item.n0), full);
      tma_load(stage + kFp8TileBytes, x_map, b * 128, static_cast<int>(item.m0), full);
      tma_load(stage + 2 * kFp8TileBytes, scale_map, static_cast<int>(item.m0), b, full);
      if (++b == kblocks) {
        b = 0;
        if (++item_i < walk.my_items) item = item_at<false>(a, walk, item_i);
      }
    }
    return;
  }

  consume_fp8_dense_items(a, walk, sh, [&](const WorkItem& item, int b) {
    return __ldg(a.w_scale + (item.n0 / kTileRows) * a.w_scale_ld + b);
  });
}

// The raw codes' 16-byte chunk c of weight row r sits at chunk c ^ codes_swizzle(r) of the row,
// so that the producers' copies (a row a thread, rows 64 bytes apart) meet 8 distinct bank groups,
// not 2; a warp's consumers still read 512 contiguous bytes (eight whole rows).
__device__ __forceinline__ int codes_swizzle(int row) { return (row / 2) % 4; }

// A K block of a grouped item whose MMAs cover N columns: the lane's weight rows' codes (words0 /
// words1: group t of rows row0 and row0 + 8, words w = 0..3 holding MMA steps 2 w and 2 w + 1) and
// shifts converted step by step into the A registers of m64nNk16 WGMMAs over the stage's x tile,
// the block's sums then added into q with the x rows' factors.
template <int N>
__device__ __forceinline__ void e2m1_block(float (&blk)[kWgmmaN128Accumulators], float (&q)[kWgmmaN128Accumulators],
                                           const uint32_t (&words0)[4], const uint32_t (&words1)[4], uint32_t scale0,
                                           uint32_t scale1, uint32_t x_tile, const float* factors, int t,
                                           TensorTurns& turns) {
  // Two sets of A registers: step i's are written once step i - 2's MMA is done.
  uint32_t frag[2][4];
  turns.acquire();
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i >= 2) wgmma_wait<1>();
    uint32_t(&f)[4] = frag[i % 2];
    const int slot = 2 * (i % 2);
    f[0] = e2m1_slot_to_f16x2(words0[i / 2], slot, scale0);
    f[1] = e2m1_slot_to_f16x2(words1[i / 2], slot, scale1);
    f[2] = e2m1_slot_to_f16x2(words0[i / 2], slot + 1, scale0);
    f[3] = e2m1_slot_to_f16x2(words1[i / 2], slot + 1, scale1);
    wgmma_fence();
    // Step i's 16 K: box i / 4, 32 bytes a step along its rows (the descriptor moves 16 bytes a unit).
    const uint64_t desc_x = wgmma_descriptor(x_tile + static_cast<uint32_t>((i / 4) * kOperandBytes)) + 2 * (i % 4);
    wgmma_m64nk16_a_regs<N>(blk, f, desc_x);
    wgmma_commit();
  }
  turns.release();
  wgmma_wait_all();
  fence_accumulators(blk);
  add_scaled_block_factors(q, blk, factors, t, N);
}

// A consumer lane's share of e2m1 stage j % kE2m1Stages once it has landed: the stage, its x tile's
// shared address, and group t of the lane's weight rows row0 and row1 (words w = 0..3 hold MMA
// steps 2 w and 2 w + 1) with their shift bytes.
struct E2m1LaneStage {
  const uint8_t* stage;
  uint32_t x_tile;
  uint32_t words0[4], words1[4];
  uint32_t shift0, shift1;
};
__device__ __forceinline__ E2m1LaneStage wait_e2m1_lane_stage(const SharedStages& sh, int j, int row0, int row1,
                                                              int t) {
  const int s = j % kE2m1Stages;
  barrier_wait(sh.full0 + 8 * s, static_cast<uint32_t>(j / kE2m1Stages) & 1u);
  const uint8_t* stage = sh.smem + s * kE2m1StageBytes;
  const uint4 codes0 =
      *reinterpret_cast<const uint4*>(stage + kE2m1Codes + row0 * kCodesRowBytes + 16 * (t ^ codes_swizzle(row0)));
  const uint4 codes1 =
      *reinterpret_cast<const uint4*>(stage + kE2m1Codes + row1 * kCodesRowBytes + 16 * (t ^ codes_swizzle(row1)));
  return {stage, sh.smem0 + static_cast<uint32_t>(s * kE2m1StageBytes),
          {codes0.x, codes0.y, codes0.z, codes0.w}, {codes1.x, codes1.y, codes1.z, codes1.w},
          stage[kE2m1Shifts + 4 * row0 + t], stage[kE2m1Shifts + 4 * row1 + t]};
}

// The chained order's consumers (kChainedBf16Wgmma, fp8_mma_gemm.h): per item, kPasses passes over
// its K blocks as ever, each pass one WGMMA accumulation over its blocks' k16 steps in ascending
// order (x's bf16 values carry their scales, the weight's conversion its shift and block scale, so
// that no block needs its own sum), each pass's sum then added in pass order into `sum`. Nothing
// waits for a block's MMAs but the next block's: the A registers are double-buffered across blocks
// (step i's wait for step i - 2 reaches back into the previous block for i < 2), and a block's stage
// is freed once the next block's second step has waited, which leaves only its last step in flight
// (four sets of A registers, waiting for step i - 4, measured no faster: docs/PERF.md session 50).
constexpr int kChainedFragSets = 2;
static_assert(8 % kChainedFragSets == 0, "a block's 8 steps must reuse the fragment sets in the global step order");
template <int N>
__device__ __forceinline__ void consume_chained_item(const F16WgmmaArgs& a, const SharedStages& sh, int& j,
                                                     float (&sum)[kWgmmaN128Accumulators],
                                                     float (&acc)[kWgmmaN128Accumulators], int row0, int row1, int t) {
  uint32_t frag[kChainedFragSets][4];
  for (int pass = 0; pass < kPasses; ++pass) {
#pragma unroll
    for (float& v : acc) v = 0.0f;
    fence_accumulators(acc);
    int pending = -1;  // the stage of the pass's previous block, whose last MMAs may still run
    for (int b = pass; b < a.kblocks; b += kPasses, ++j) {
      const int s = j % kE2m1Stages;
      const E2m1LaneStage lane = wait_e2m1_lane_stage(sh, j, row0, row1, t);
      const float block_scale = reinterpret_cast<const float*>(lane.stage + kE2m1Factors)[0];
      const uint32_t scale0 = e2m1_bf16x2_scale(lane.shift0, block_scale);
      const uint32_t scale1 = e2m1_bf16x2_scale(lane.shift1, block_scale);
      const uint32_t(&words0)[4] = lane.words0;
      const uint32_t(&words1)[4] = lane.words1;
      const uint32_t x_tile = lane.x_tile;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        wgmma_wait<kChainedFragSets - 1>();  // at a pass's first steps nothing runs yet, but ptxas cannot know it
        if (i == kChainedFragSets - 1 && pending >= 0) barrier_arrive(sh.empty0 + 8 * pending);
        uint32_t(&f)[4] = frag[i % kChainedFragSets];
        const int slot = 2 * (i % 2);
        f[0] = e2m1_slot_to_bf16x2(words0[i / 2], slot, scale0);
        f[1] = e2m1_slot_to_bf16x2(words1[i / 2], slot, scale1);
        f[2] = e2m1_slot_to_bf16x2(words0[i / 2], slot + 1, scale0);
        f[3] = e2m1_slot_to_bf16x2(words1[i / 2], slot + 1, scale1);
        wgmma_fence();
        const uint64_t desc_x = wgmma_descriptor(x_tile + static_cast<uint32_t>((i / 4) * kOperandBytes)) + 2 * (i % 4);
        wgmma_m64nk16_a_regs<N, true>(acc, f, desc_x);
        wgmma_commit();
      }
      pending = s;
    }
    wgmma_wait_all();
    fence_accumulators(acc);
    if (pending >= 0) barrier_arrive(sh.empty0 + 8 * pending);
#pragma unroll
    for (int r = 0; r < kWgmmaN128Accumulators; ++r) sum[r] = pass == 0 ? acc[r] : __fadd_rn(sum[r], acc[r]);
  }
}

// x's tensor maps for the grouped items' columns: boxes of 32, 64, 96 and 128 rows (map
// columns / 32 - 1).
struct XMapsByColumns {
  CUtensorMap map[4];
};

template <bool kChained>
__global__ void __launch_bounds__(kThreads, 1)
    f16_wgmma_e2m1_kernel(const __grid_constant__ XMapsByColumns x_maps, const F16WgmmaArgs a) {
  pdl_wait();
  extern __shared__ uint8_t f16_wgmma_smem_raw[];
  const SharedStages sh = shared_stages(f16_wgmma_smem_raw, kE2m1Stages, kE2m1StageBytes);
  const ItemWalk walk = item_walk(a, true);
  const int kblocks = a.kblocks;
  const int my_blocks = static_cast<int>(walk.my_items * kblocks);  // the host keeps it under 2^31
  // The full barriers: the TMA copy's arrival and two of each producer thread (its row's codes
  // landed, its x row's factor stored). Empty ones: every consumer thread's, each having read its
  // weight rows' codes.
  init_stage_barriers(sh.full0, sh.empty0, kE2m1Stages, 1 + 2 * kTileRows, kWarps * 32);

  if (threadIdx.x >= kWarps * 32) {  // the producer warpgroup: thread `row` copies weight row `row`
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters) : "memory");
    const int row = static_cast<int>(threadIdx.x) - kWarps * 32;
    const auto* const unread = reinterpret_cast<const uint8_t*>(a.group_w);  // a source the zero fills name
    int local = 0;
    int64_t item_i = 0;
    WorkItem item;
    const uint8_t* row_codes = nullptr;  // the row's codes and shifts in the item's weight (nullptr past n)
    const uint8_t* row_shifts = nullptr;
    const float* w_scales = nullptr;  // the item's weight scales of its 128 rows, a K block each
    const float* x_scales = nullptr;  // x row item.m0 + row's scales, x_scale_ld apart (nullptr past the tile)
    const auto start_item = [&](int64_t i) {
      item = item_at<true>(a, walk, i);
      const int64_t w_row = item.n0 + row;
      row_codes = w_row < a.n ? a.group_w[item.group] + e2m1_row_codes_at(w_row, a.k) : nullptr;
      row_shifts = w_row < a.n ? a.group_w_shift[item.group] + e2m1_row_shifts_at(w_row, a.k) : nullptr;
      w_scales = a.group_w_scale[item.group] + (item.n0 / kTileRows) * a.w_scale_ld;
      x_scales = row < item.rows ? a.x_scale + item.m0 + row : nullptr;
    };
    if (walk.my_items > 0) start_item(0);
    for (int j = 0; j < my_blocks; ++j) {
      const int s = j % kE2m1Stages, b = staged_block_at(local, kblocks);
      // x row item.m0 + row's factor of the block, sw x sx as the consumers would multiply them (the
      // A operand holds the cast's values times 2^-14, exactly; sw takes it back); the loads are
      // issued before the wait for the stage.
      // Chained: the block's weight scale alone, the same for every row (x's values carry theirs).
      const float sw = __ldg(w_scales + b) * (kChained ? 1.0f : kE2M1ScaleBack);
      const float sx = kChained ? 1.0f : x_scales != nullptr ? __ldg(x_scales + b * a.x_scale_ld) : 0.0f;
      if (j >= kE2m1Stages) barrier_wait(sh.empty0 + 8 * s, static_cast<uint32_t>(j / kE2m1Stages - 1) & 1u);
      const uint32_t stage = sh.smem0 + static_cast<uint32_t>(s * kE2m1StageBytes), full = sh.full0 + 8 * s;
      const bool valid = row_codes != nullptr;
#pragma unroll
      for (int c = 0; c < 4; ++c)
        cp_async16(stage + static_cast<uint32_t>(kE2m1Codes + row * kCodesRowBytes + 16 * (c ^ codes_swizzle(row))),
                   valid ? row_codes + b * kE2m1BlockCodeStride + 16 * c : unread, valid);
      cp_async4(stage + static_cast<uint32_t>(kE2m1Shifts + 4 * row), valid ? row_shifts + kE2m1BlockShiftStride * b : unread,
                valid);
      cp_async_arrive_on(full);
      reinterpret_cast<float*>(sh.smem + s * kE2m1StageBytes + kE2m1Factors)[row] = sw * sx;
      barrier_arrive(full);
      if (row == 0) {
        const int columns = grouped_item_columns(item.rows);
        const CUtensorMap& x_map = x_maps.map[columns / 32 - 1];
        barrier_expect_bytes(full, static_cast<uint32_t>(2 * columns * kBoxK * 2));
        tma_load(stage, x_map, b * 128, static_cast<int>(item.m0), full);
        tma_load(stage + kOperandBytes, x_map, b * 128 + kBoxK, static_cast<int>(item.m0), full);
      }
      if (++local == kblocks) {
        local = 0;
        if (++item_i < walk.my_items) start_item(item_i);
      }
    }
    cp_async_wait_all();
    return;
  }

  const int lane = threadIdx.x % 32, t = lane % 4;
  // The lane's weight rows of the tile: row0 and row0 + 8.
  const int row0 = 64 * (threadIdx.x / 128) + 16 * (threadIdx.x / 32 % 4) + lane / 4, row1 = row0 + 8;
  int j = 0;
  if constexpr (kChained) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters) : "memory");
    float sum[kWgmmaN128Accumulators], acc[kWgmmaN128Accumulators];
    for (int64_t i = 0; i < walk.my_items; ++i) {
      const WorkItem item = item_at<true>(a, walk, i);
      // Each width's MMAs in a loop of its own (see below).
      switch (grouped_item_columns(item.rows)) {
        case 32: consume_chained_item<32>(a, sh, j, sum, acc, row0, row1, t); break;
        case 64: consume_chained_item<64>(a, sh, j, sum, acc, row0, row1, t); break;
        case 96: consume_chained_item<96>(a, sh, j, sum, acc, row0, row1, t); break;
        default: consume_chained_item<128>(a, sh, j, sum, acc, row0, row1, t); break;
      }
      store_item_sums(a, item, sum);
    }
    return;
  }
  consume_items<true>(a, walk, [](float (&)[kWgmmaN128Accumulators], const WorkItem&, int) {},
                         [&](float (&blk)[kWgmmaN128Accumulators], float (&q)[kWgmmaN128Accumulators],
                             const WorkItem& item, int, TensorTurns& turns) {
    const int columns = grouped_item_columns(item.rows);
    const int s = j % kE2m1Stages;
    const E2m1LaneStage lane = wait_e2m1_lane_stage(sh, j, row0, row1, t);
    const uint32_t scale0 = pow2_f16x2(lane.shift0), scale1 = pow2_f16x2(lane.shift1);
    const uint32_t(&words0)[4] = lane.words0;
    const uint32_t(&words1)[4] = lane.words1;
    const uint32_t x_tile = lane.x_tile;
    const float* factors = reinterpret_cast<const float*>(lane.stage + kE2m1Factors);
    // Each width's MMAs run to their end in their own branch: with the widths chosen per MMA step,
    // ptxas fenced the warpgroup before each one (C7519), which serialised them.
    switch (columns) {
      case 32: e2m1_block<32>(blk, q, words0, words1, scale0, scale1, x_tile, factors, t, turns); break;
      case 64: e2m1_block<64>(blk, q, words0, words1, scale0, scale1, x_tile, factors, t, turns); break;
      case 96: e2m1_block<96>(blk, q, words0, words1, scale0, scale1, x_tile, factors, t, turns); break;
      default: e2m1_block<128>(blk, q, words0, words1, scale0, scale1, x_tile, factors, t, turns); break;
    }
    barrier_arrive(sh.empty0 + 8 * s);
    ++j;
  });
}

// kConvertBlocks K blocks a CTA: their codes into shared memory in 16-byte chunks (thread i,
// chunk i: coalesced), then thread i writes 16-byte output chunk i: block i / 16's fp16 words
// 4 (i % 16) .. 4 (i % 16) + 3, which are (fp8_mma_gemm.h's order) the low (i % 2 == 0) or high
// two codes of code words 8 t + s, s = (i % 16) / 2, t = 0..3.
constexpr int kConvertThreads = 256;
constexpr int kConvertBlocks = kConvertThreads / 16;
__global__ void __launch_bounds__(kConvertThreads) e4m3_to_f16_mma_order_kernel(const uint8_t* codes, uint16_t* out,
                                                                                int64_t blocks) {
  pdl_wait();
  __shared__ uint4 chunks[kConvertBlocks * 8];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kConvertBlocks;
  const int tid = threadIdx.x;
  if (tid < kConvertBlocks * 8 && first + tid / 8 < blocks)
    chunks[tid] = reinterpret_cast<const uint4*>(codes + first * 128)[tid];
  __syncthreads();
  const int block = tid / 16, chunk = tid % 16, s = chunk / 2, high = chunk % 2;
  if (first + block >= blocks) return;
  const auto* words = reinterpret_cast<const uint32_t*>(chunks) + block * 32;
  uint32_t o[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const uint32_t word = words[8 * t + s];
    o[t] = e4m3x2_to_f16x2(high ? word >> 16 : word & 0xffffu);
  }
  reinterpret_cast<uint4*>(out + first * 128)[tid] = make_uint4(o[0], o[1], o[2], o[3]);
}

// bf16 values in the same layout, from bf16 values (x of wo_a) or e4m3 codes (its weight; with
// `scale` set, each code's value times its block scale scale[(row / 128) scale_ld + K block], exact:
// the chained order's weights): thread i writes 16-byte output chunk c = i % 16 of block i / 16,
// which holds inputs 32 t + 4 s + 2 (c % 2) and the one after, s = c / 2, t = 0..3: input pair
// 16 t + 2 s + c % 2 of the block. Source rows are `ld` elements apart (out's are contiguous).
template <bool kE4m3>
__global__ void __launch_bounds__(kConvertThreads) to_bf16_mma_order_kernel(const void* src, int64_t ld,
                                                                            uint16_t* out, int64_t blocks,
                                                                            int64_t row_blocks, const float* scale,
                                                                            int64_t scale_ld) {
  pdl_wait();
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kConvertThreads + threadIdx.x, block = chunk / 16;
  if (block >= blocks) return;
  const int64_t row = block / row_blocks, first_pair = (row * ld + (block - row * row_blocks) * 128) / 2;
  const int c = static_cast<int>(chunk % 16), pair0 = 2 * (c / 2) + c % 2;
  const float block_scale = kE4m3 && scale != nullptr ? __ldg(scale + row / 128 * scale_ld + block - row * row_blocks) : 1.0f;
  uint32_t o[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int64_t pair = first_pair + 16 * t + pair0;
    if constexpr (kE4m3) {
      const uint32_t codes = static_cast<const uint16_t*>(src)[pair];
      if (scale == nullptr) o[t] = e4m3x2_to_bf16x2(codes);
      else o[t] = f16x2_codes_to_scaled_bf16x2(e4m3x2_to_f16x2(codes), block_scale);
    } else {
      o[t] = static_cast<const uint32_t*>(src)[pair];
    }
  }
  reinterpret_cast<uint4*>(out)[chunk] = make_uint4(o[0], o[1], o[2], o[3]);
}

// The driver's cuTensorMapEncodeTiled, found through the runtime so that nothing links libcuda.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    DSV4_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw CudaError("f16_wgmma_gemm: the driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12+ driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A 2-D tensor map of `outer` rows of `inner` elements, rows `row_bytes` apart, read in boxes of
// box_outer x box_inner; reads past either end give zeros.
CUtensorMap tensor_map_2d(const char* what, const void* base, CUtensorMapDataType type, uint64_t inner, uint64_t outer,
                          uint64_t row_bytes, uint32_t box_inner, uint32_t box_outer, CUtensorMapSwizzle swizzle) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw CudaError(std::string("f16_wgmma_gemm: cuTensorMapEncodeTiled failed (CUresult ") + std::to_string(r) +
                    ") for " + what + ": " + std::to_string(outer) + " x " + std::to_string(inner) + ", rows " +
                    std::to_string(row_bytes) + " bytes apart");
  return map;
}

// The map of a row-major [rows, k] matrix of e4m3 codes, read 128 rows by 128 codes (a K block)
// at a time into the 128-byte swizzle the FP8 WGMMAs read; rows past `rows` read as zeros.
CUtensorMap e4m3_rows_map(const char* what, const uint8_t* codes, int64_t rows, int64_t k) {
  const auto cols = static_cast<uint64_t>(k);
  return tensor_map_2d(what, codes, CU_TENSOR_MAP_DATA_TYPE_UINT8, cols, static_cast<uint64_t>(rows), cols, 128,
                       kTileRows, CU_TENSOR_MAP_SWIZZLE_128B);
}

// The map of x's scales [k / 128, x_scale_ld] (block b's scale of row r at b * x_scale_ld + r),
// read a K block's 128 rows at a time; rows past m read as zeros.
CUtensorMap x_scale_map(const float* x_scale, int64_t m, int64_t k, int64_t x_scale_ld) {
  return tensor_map_2d("x_scale", x_scale, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(m),
                       static_cast<uint64_t>(k / 128), 4 * static_cast<uint64_t>(x_scale_ld), kTileRows, 1,
                       CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace

void check_f16_wgmma_gemm(const Fp8MmaGemmParams& p) {
  const bool chained = p.kernel == Fp8MmaKernel::kChainedBf16Wgmma;
  const auto refuse = [&](const std::string& why) {
    throw UsageError(std::string("fp8_mma_gemm: the ") + fp8_mma_kernel_name(p.kernel) + " kernel " + why);
  };
  const bool grouped = p.tiles != nullptr;
  if (grouped && p.w_codes != Fp8MmaWeightCodes::kE2M1) refuse("takes grouped tiles of e2m1 weights only");
  if (!grouped && p.w_codes != Fp8MmaWeightCodes::kE4M3) refuse("takes dense calls of e4m3 weights only");
  if (grouped && (p.tile_count == nullptr || p.group_w == nullptr || p.group_w_shift == nullptr ||
                  p.group_w_scale == nullptr || p.tile_rows < 1 || p.tile_rows > kTileRows))
    refuse("needs a grouped call's tile count, weights, shifts, scales and tiles of 1 to 128 rows");
  if (p.second.n > 0) refuse("takes no second output");
  if (p.x16 == nullptr || (!grouped && p.w16 == nullptr))
    refuse("needs x16 and (dense) w16 (the operands e4m3_to_f16_mma_order writes)");
  if (!aligned16(p.x16) || !aligned16(p.w16) || (!chained && !aligned16(p.x_scale)))
    refuse("needs x16, w16 and x_scale 16-byte aligned");
  if (!chained && (p.x_scale_ld % 4 != 0 || p.x_scale_ld < p.m))
    refuse("needs x_scale_ld a multiple of 4 and at least m (x_scale_ld=" + std::to_string(p.x_scale_ld) +
           ", m=" + std::to_string(p.m) + ")");
  if (p.k % 128 != 0) refuse("needs k a multiple of 128 (k=" + std::to_string(p.k) + ")");
}

namespace {

// The persistent grid for a's items: a CTA an SM at most. `what` names the call in the error for
// one too large (a CTA's steps must stay under 2^31).
dim3 persistent_grid(const F16WgmmaArgs& a, const std::string& what) {
  const int64_t ctas = std::min<int64_t>(a.m_tiles * a.n_tiles, current_device_sm_count());
  if ((a.m_tiles * a.n_tiles + ctas - 1) / ctas * 2 * a.kblocks > INT32_MAX)
    throw UsageError(what + ": " + std::to_string(a.m) + " x " + std::to_string(a.n) + " x " + std::to_string(a.k) +
                     " is too large for one f16-wgmma call (split its rows)");
  return dim3(static_cast<unsigned>(ctas));
}

int set_shared(const void* kernel, int bytes) {
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return bytes;
}

// The dense kernel over the weight w [a.n, a.k] and x [a.m, x_columns] (16-bit values in the MMA
// steps' K order; a.group_rows says which columns of x a weight row meets) and, for fp16 operands,
// x's scales.
template <bool kBf16, bool kChained = false>
void launch_dense(const F16WgmmaArgs& a, const void* w, const void* x, int64_t x_columns, const float* x_scale,
                  int64_t x_scale_ld, const std::string& what, cudaStream_t stream) {
  const CUtensorMapDataType type = kBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const auto k = static_cast<uint64_t>(a.k), xk = static_cast<uint64_t>(x_columns);
  const CUtensorMap x_map = tensor_map_2d("x16", x, type, xk, static_cast<uint64_t>(a.m), 2 * xk, kBoxK, kTileRows,
                                          CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap w_map = tensor_map_2d("w16", w, type, k, static_cast<uint64_t>(a.n), 2 * k, kBoxK, kTileRows,
                                          CU_TENSOR_MAP_SWIZZLE_128B);
  // bf16 operands carry no x scales: the kernel never reads this map.
  const CUtensorMap scale_map = kBf16 ? CUtensorMap{}
                                      : x_scale_map(x_scale, a.m, a.k, x_scale_ld);
  const int bytes = set_shared(reinterpret_cast<const void*>(f16_wgmma_dense_kernel<kBf16, kChained>),
                               shared_bytes(kDenseStages, kDenseStageBytes));
  launch_pdl(f16_wgmma_dense_kernel<kBf16, kChained>, persistent_grid(a, what), kThreads, bytes, stream, w_map, x_map,
             scale_map, a);
}

// The kernels' arguments for an fp8_mma_gemm call.
F16WgmmaArgs args_of(const Fp8MmaGemmParams& p) {
  const bool grouped = p.tiles != nullptr;
  F16WgmmaArgs a;
  a.w_scale = p.w_scale;
  a.w_scale_ld = p.w_scale_ld;
  a.y = p.y;
  a.ldy = p.ldy;
  a.m = p.m;
  a.n = p.n;
  a.k = p.k;
  a.m_tiles = grouped ? p.max_tiles : (p.m + kTileRows - 1) / kTileRows;  // grouped: the most there may be
  a.n_tiles = (p.n + kTileRows - 1) / kTileRows;
  a.kblocks = static_cast<int>(p.k / 128);
  a.x_scale = p.x_scale;
  a.x_scale_ld = p.x_scale_ld;
  a.tiles = p.tiles;
  a.tile_count = p.tile_count;
  a.group_w = p.group_w;
  a.group_w_shift = p.group_w_shift;
  a.group_w_scale = p.group_w_scale;
  return a;
}

}  // namespace

void f16_wgmma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream) {
  const bool grouped = p.tiles != nullptr;
  if (p.m == 0 || p.n == 0 || p.k == 0 || (grouped && p.max_tiles == 0)) return;
  const F16WgmmaArgs a = args_of(p);
  // The chained order's operands are bf16 with every scale folded in (its kernels read no scale of x
  // or, dense, of the weight).
  const bool chained = p.kernel == Fp8MmaKernel::kChainedBf16Wgmma;
  if (!grouped) {
    if (chained) launch_dense<true, true>(a, p.w16, p.x16, p.k, nullptr, 0, "fp8_mma_gemm", stream);
    else launch_dense<false>(a, p.w16, p.x16, p.k, p.x_scale, p.x_scale_ld, "fp8_mma_gemm", stream);
    return;
  }
  // The e2m1 weights are converted in the kernel: no w map.
  const auto k = static_cast<uint64_t>(p.k);
  XMapsByColumns x_maps;
  for (int i = 0; i < 4; ++i)
    x_maps.map[i] = tensor_map_2d("x16", p.x16, chained ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                  k, static_cast<uint64_t>(p.m), 2 * k, kBoxK, static_cast<uint32_t>(32 * (i + 1)),
                                  CU_TENSOR_MAP_SWIZZLE_128B);
  auto* const kernel = chained ? f16_wgmma_e2m1_kernel<true> : f16_wgmma_e2m1_kernel<false>;
  const int bytes = set_shared(reinterpret_cast<const void*>(kernel), shared_bytes(kE2m1Stages, kE2m1StageBytes));
  launch_pdl(kernel, persistent_grid(a, "fp8_mma_gemm"), kThreads, bytes, stream, x_maps, a);
}

namespace {

// The dense kernel's bf16 form: y [m, n] (row stride ldy) from x_mma [m, x_columns] and w_mma
// [n, k] (16-byte aligned), with weight scales (or none: w_scale null) and weight rows in groups
// of group_rows (0: one group). `what` names the caller in errors.
void launch_bf16_dense(const uint16_t* x_mma, int64_t x_columns, const uint16_t* w_mma, const float* w_scale,
                       int64_t w_scale_ld, MutFloatPtr y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                       int64_t group_rows, const std::string& what, cudaStream_t stream) {
  if (!aligned16(x_mma) || !aligned16(w_mma)) throw UsageError(what + ": x_mma and w_mma must be 16-byte aligned");
  if (m == 0 || n == 0) return;
  F16WgmmaArgs a;
  a.w_scale = w_scale;
  a.w_scale_ld = w_scale_ld;
  a.y = y;
  a.ldy = ldy;
  a.m = m;
  a.n = n;
  a.k = k;
  a.m_tiles = (m + kTileRows - 1) / kTileRows;
  a.n_tiles = (n + kTileRows - 1) / kTileRows;
  a.kblocks = static_cast<int>(k / 128);
  a.group_rows = group_rows;
  launch_dense<true>(a, w_mma, x_mma, x_columns, nullptr, 0, what, stream);
}

}  // namespace

bool grouped_bf16_wgmma_takes(const GroupedBf16Fp8GemmParams& p) {
  return p.r % kTileRows == 0 && p.k % 128 == 0 && p.tokens > 0 && p.groups > 0;
}

void grouped_bf16_wgmma_gemm(const GroupedBf16Fp8GemmParams& p, const uint16_t* x_mma, const uint16_t* w_mma,
                             cudaStream_t stream) {
  if (!grouped_bf16_wgmma_takes(p))
    throw UsageError("grouped_bf16_wgmma_gemm: r=" + std::to_string(p.r) + ", k=" + std::to_string(p.k) +
                     ": r must be a multiple of 128 and k of 128, with tokens and groups");
  launch_bf16_dense(x_mma, p.groups * p.k, w_mma, p.w_scale, p.w_scale_ld, p.y, p.groups * p.r, p.tokens,
                    p.groups * p.r, p.k, p.r, "grouped_bf16_wgmma_gemm", stream);
}

void bf16_wgmma_gemm(const uint16_t* x_mma, const uint16_t* w_mma, MutFloatPtr y, int64_t ldy, int64_t m, int64_t n,
                     int64_t k, cudaStream_t stream) {
  if (k % 128 != 0 || ldy < n)
    throw UsageError("bf16_wgmma_gemm: k=" + std::to_string(k) + " must be a multiple of 128 and ldy=" +
                     std::to_string(ldy) + " at least n=" + std::to_string(n));
  launch_bf16_dense(x_mma, k, w_mma, nullptr, 0, y, ldy, m, n, k, 0, "bf16_wgmma_gemm", stream);
}

void e4m3_to_f16_mma_order(const uint8_t* codes, uint16_t* out, int64_t rows, int64_t k, cudaStream_t stream) {
  if (k % 128 != 0) throw UsageError("e4m3_to_f16_mma_order: k=" + std::to_string(k) + " is not a multiple of 128");
  if (!aligned16(codes) || !aligned16(out)) throw UsageError("e4m3_to_f16_mma_order: codes and out must be 16-byte aligned");
  const int64_t blocks = rows * (k / 128);
  if (blocks == 0) return;
  launch_pdl(e4m3_to_f16_mma_order_kernel, dim3(static_cast<unsigned>((blocks + kConvertBlocks - 1) / kConvertBlocks)),
             kConvertThreads, 0, stream, codes, out, blocks);
}

bool fp8_wgmma_dense_takes(const Fp8MmaGemmParams& p) {
  return p.tiles == nullptr && p.w_codes == Fp8MmaWeightCodes::kE4M3 && p.second.n == 0 && p.x != nullptr &&
         p.w != nullptr && p.w_scale != nullptr && aligned16(p.x) && aligned16(p.w) && aligned16(p.x_scale) &&
         p.x_scale_ld % 4 == 0 && p.x_scale_ld >= p.m && p.k % 128 == 0;
}

void fp8_wgmma_dense_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream) {
  if (!fp8_wgmma_dense_takes(p))
    throw UsageError("fp8_wgmma_dense_gemm: needs a dense call of e4m3 weights with scales and no second output, x, w "
                     "and x_scale 16-byte aligned, x_scale_ld (" + std::to_string(p.x_scale_ld) +
                     ") a multiple of 4 and at least m (" + std::to_string(p.m) + "), k (" + std::to_string(p.k) +
                     ") a multiple of 128");
  if (p.m == 0 || p.n == 0 || p.k == 0) return;
  const F16WgmmaArgs a = args_of(p);
  const CUtensorMap x_map = e4m3_rows_map("x", p.x, p.m, p.k);
  const CUtensorMap w_map = e4m3_rows_map("w", p.w, p.n, p.k);
  const CUtensorMap scale_map = x_scale_map(p.x_scale, p.m, p.k, p.x_scale_ld);
  const int bytes = set_shared(reinterpret_cast<const void*>(fp8_wgmma_dense_kernel), shared_bytes(kFp8Stages, kFp8StageBytes));
  launch_pdl(fp8_wgmma_dense_kernel, persistent_grid(a, "fp8_mma_gemm"), kThreads, bytes, stream, w_map, x_map, scale_map,
             a);
}

namespace {

template <bool kE4m3>
void to_bf16_mma_order(const char* what, const void* src, size_t src_alignment, int64_t ld, uint16_t* out,
                       int64_t rows, int64_t k, cudaStream_t stream, const float* scale = nullptr,
                       int64_t scale_ld = 0) {
  if (k % 128 != 0) throw UsageError(std::string(what) + ": k=" + std::to_string(k) + " is not a multiple of 128");
  if (ld < k || ld % 2 != 0)
    throw UsageError(std::string(what) + ": the row stride " + std::to_string(ld) + " must be even and at least k=" +
                     std::to_string(k));
  if (reinterpret_cast<uintptr_t>(src) % src_alignment != 0 || !aligned16(out))
    throw UsageError(std::string(what) + ": the source must be " + std::to_string(src_alignment) +
                     "-byte aligned and out 16-byte aligned");
  const int64_t chunks = rows * (k / 128) * 16;
  if (chunks == 0) return;
  launch_pdl(to_bf16_mma_order_kernel<kE4m3>, dim3(static_cast<unsigned>((chunks + kConvertThreads - 1) / kConvertThreads)),
             kConvertThreads, 0, stream, src, ld, out, chunks / 16, k / 128, scale, scale_ld);
}

}  // namespace

void bf16_to_mma_order(const uint16_t* x, int64_t ldx, uint16_t* out, int64_t rows, int64_t k, cudaStream_t stream) {
  to_bf16_mma_order<false>("bf16_to_mma_order", x, 4, ldx, out, rows, k, stream);
}

void e4m3_to_bf16_mma_order(const uint8_t* codes, uint16_t* out, int64_t rows, int64_t k, cudaStream_t stream) {
  to_bf16_mma_order<true>("e4m3_to_bf16_mma_order", codes, 2, k, out, rows, k, stream);
}

void e4m3_to_bf16_scaled_mma_order(const uint8_t* codes, const float* scale, int64_t scale_ld, uint16_t* out,
                                   int64_t rows, int64_t k, cudaStream_t stream) {
  if (scale == nullptr || scale_ld < k / 128)
    throw UsageError("e4m3_to_bf16_scaled_mma_order: needs the block scales with a row stride of at least k / 128 (" +
                     std::to_string(k / 128) + "), got " + std::to_string(scale_ld));
  to_bf16_mma_order<true>("e4m3_to_bf16_scaled_mma_order", codes, 2, k, out, rows, k, stream, scale, scale_ld);
}

}  // namespace dsv4::kernels
