// fp8_mma_gemm's kF16Wgmma: the staged kernel's arithmetic (fp8_mma_gemm.h's summation order) on
// Hopper's fp16 WGMMA, fed by TMA, for prefill-sized dense GEMMs and the routed experts' grouped
// GEMMs of MXFP4 weights.
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
// against all 128 x rows) and a producer warpgroup, one lane of which issues the copies, so that
// no consumer waits on the copies' behalf (thread 0 of the consumers issuing them, the kernel was
// 1.5-2x slower). A stage is half a K block (64 K: one 128-byte swizzled row per operand row, as
// TMA's 128-byte swizzle and the WGMMA descriptor agree on) of both operands, and the block's 128
// x scales with its second half; kStages stages keep three blocks in flight. Full barriers (TMA's
// transaction counts) say a stage landed, empty barriers (one arrival per consumer warp) that
// every consumer is done with it. Each consumer thread keeps three sets of 64 fp32 registers: the
// block's sum, its pass's lane sum and the running sum of the passes, which setmaxnreg makes room
// for by taking the producer's registers (a producer warp alone, 288 threads, capped ptxas at 168
// registers a thread and spilled).
// The grid is persistent (a CTA an SM, taking tiles in turn, so that the next tile's first copies
// overlap a tile's last blocks and its stores); tiles are rasterised in groups of kRasterGroup x
// tiles, so that the CTAs at work share a few x tiles and weight tiles in L2.
//
// Grouped e2m1 weights (the E2M1 kernel; the routed experts at prefill): a tile is one of the
// plan's x tiles (one expert's rows) against 128 rows of that expert's weight. A per-call fp16
// copy of all experts' weights would be 13 GB a layer (tried: the 8k prefill took 2.5 s), so the
// producer warpgroup converts the weight as it goes: each of its 128 threads copies one weight
// row's codes and shifts of a K block into a ring of raw blocks with cp.async, two blocks ahead,
// and writes the row's fp16 values, the cast's values times 2^-14 (e2m1_fp16.cuh, exact), into
// each stage's swizzled w tile; TMA brings x and its scales (a tile starts at any row, and a TMA
// box must start 16 bytes into a row of scales: an unaligned start is an illegal instruction, so
// the box starts up to 3 rows early and holds 4 more). What it took to not be bound by the
// conversions (docs/PERF.md session 22): all 128 threads converting, the raw ring swizzled (a row
// each thread, 64 bytes apart, met 2 bank groups), shared memory reached as shared (LDS / STS, not
// generic accesses), and no global load in the converters' loop, whose fence.proxy.async waits for
// every outstanding load (MEMBAR.ALL.CTA): the scales come by TMA and the group tables are read
// once a tile.
#include "kernels/gemm/f16_wgmma_gemm.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
#include "kernels/gemm/e2m1_fp16.cuh"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/gemm/staged_tiles.cuh"
#include "kernels/gemm/wgmma.cuh"
#include "kernels/launch.cuh"
#include "kernels/sm_count.h"

namespace dsv4::kernels {
namespace {

constexpr int kWarps = 8;                   // two consumer warpgroups
constexpr int kThreads = kWarps * 32 + 128;  // and the producer warpgroup (one lane of it issues the copies)
constexpr int kTileRows = 128;  // weight rows and x rows of a CTA
constexpr int kStageK = 64;     // K of a stage: 128 bytes of fp16 a row
constexpr int kStages = 6;
constexpr int kOperandBytes = kTileRows * kStageK * 2;
constexpr int kScaleBytes = kTileRows * 4;
// E2M1: a grouped tile starts at any x row, and the TMA box of its x scales at the multiple of 4
// rows (16 bytes) at or before it, so the box holds 4 rows more.
constexpr int kGroupedScaleRows = kTileRows + 4;
constexpr int kStageBytes = 2 * kOperandBytes + 1024;  // w, x, x scales (512 B, padded: tiles stay 1024-aligned)
constexpr int kRasterGroup = 8;

// setmaxnreg's registers a thread: the producer warpgroup gives up what the consumers take. A CTA
// holds kThreads x 168 registers (ptxas's cap for 384 threads), and a setmaxnreg.inc that asks for
// more than the CTA holds waits for ever (80 / 216 hung: PERF.md session 21), so the two must fit
// in it. The E2M1 producer converts, and needs more than the dense one's copies.
template <bool E2M1>
struct F16WgmmaRegisters {
  static constexpr int kProducer = E2M1 ? 72 : 40;
  static constexpr int kConsumer = E2M1 ? 216 : 232;
  static_assert(128 * kProducer + kWarps * 32 * kConsumer <= kThreads * 168,
                "f16_wgmma_gemm: setmaxnreg asks for more registers than the CTA holds");
};

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
  // Grouped (E2M1 kernel): tile t covers tiles[t] with group tiles[t].group's e2m1 weight.
  const Fp8MmaTile* tiles = nullptr;
  const int32_t* tile_count = nullptr;
  const uint8_t* const* group_w = nullptr;
  const uint8_t* const* group_w_shift = nullptr;
  const float* const* group_w_scale = nullptr;
};

// A work item of a CTA: 128 weight rows from n0 against x rows [m0, m0 + rows) (grouped: of one
// group's weight).
struct WorkItem {
  int64_t m0 = 0, n0 = 0;
  int rows = 0;
  int group = 0;
};

// The kernel's shared memory: kStages stages of [w][x][x scales], (E2M1) a ring of kRawBlocks K
// blocks of the weight rows' e2m1 codes and shifts, then the full and empty barriers.
template <bool E2M1>
struct F16WgmmaLayout {
  static constexpr int kRawRowBytes = 64;  // a row's e2m1 codes of a K block
  static constexpr int kRawShifts = kTileRows * kRawRowBytes;
  static constexpr int kRawBlockBytes = kRawShifts + kTileRows * 4;
  static constexpr int kRawBlocks = E2M1 ? 3 : 0;
  static constexpr int kRaw = kStages * kStageBytes;
  static constexpr int kBarriers = kRaw + kRawBlocks * kRawBlockBytes;
  static constexpr int kSharedBytes = 1024 + kBarriers + 2 * kStages * 8;  // + alignment
  static_assert(kSharedBytes <= 227 * 1024, "f16_wgmma_gemm's shared memory exceeds Hopper's 227 KiB");
};

__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival that also announces `bytes` of copies that will complete on the barrier.
__device__ __forceinline__ void barrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

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

// The box of `map` at (inner, outer) into shared memory at dst, completing on barrier bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap& map, int inner, int outer, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
}

// E2M1: the producer thread of weight row `row` converts its e2m1 codes of half `half` of a K
// block (raw: the row's 64 bytes, 4 groups of 32 inputs in e2m1_mma_order's layout; shifts: the
// groups' 4 shift bytes) into the stage's swizzled fp16 w tile, as the cast's values times 2^-14
// (e2m1_fp16.cuh; the consumers take the 2^14 back in the block scale). K position p = 16 s + 2 t
// + (i % 2) + 8 (i / 2) holds input 32 t + 4 s + i (fp8_mma_gemm.h): 16-byte chunk c of the
// half's row holds, for MMA step s = 4 half + c / 2 and j = c % 2, the pairs of slot 2 (s % 2) + j
// of word s / 2 of groups t = 0..3.
// The raw ring's 16-byte chunk c of row r sits at chunk c ^ raw_swizzle(r) of the row, so that
// the 32 rows of a warp's converters (two to 128 bytes) meet 8 distinct bank groups, not 2 (a
// 16-way conflict on every read).
__device__ __forceinline__ int raw_swizzle(int row) { return (row / 2) % 4; }

__device__ __forceinline__ void convert_e2m1_half_row(const uint8_t* raw, uint32_t shifts, uint8_t* w_tile, int row,
                                                      int half) {
  uint2 groups[4];  // words 2 half and 2 half + 1 of each group: the ones this half's MMA steps take
#pragma unroll
  for (int t = 0; t < 4; ++t) groups[t] = *reinterpret_cast<const uint2*>(raw + 16 * (t ^ raw_swizzle(row)) + 8 * half);
  uint32_t scale[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) scale[t] = pow2_f16x2((shifts >> (8 * t)) & 0xffu);
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const int s = 4 * half + c / 2, slot = 2 * (s % 2) + c % 2;
    uint32_t out[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) out[t] = e2m1_slot_to_f16x2((c / 4) ? groups[t].y : groups[t].x, slot, scale[t]);
    *reinterpret_cast<uint4*>(w_tile + row * 128 + ((c ^ (row % 8)) << 4)) = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

template <bool E2M1>
__global__ void __launch_bounds__(kThreads, 1)
    f16_wgmma_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                          const __grid_constant__ CUtensorMap scale_map, const F16WgmmaArgs a) {
  using Layout = F16WgmmaLayout<E2M1>;
  pdl_wait();
  extern __shared__ uint8_t f16_wgmma_smem_raw[];
  // Aligned by an offset from the shared array itself, so that the compiler knows the pointer is
  // shared memory (LDS / STS: through an integer cast it issued generic accesses).
  uint8_t* const smem = f16_wgmma_smem_raw + (1024u - shared_address(f16_wgmma_smem_raw) % 1024u) % 1024u;
  const uint32_t smem0 = shared_address(smem);
  const uint32_t full0 = smem0 + Layout::kBarriers, empty0 = full0 + kStages * 8;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, warp_in_group = warp % 4;
  const int g = lane / 4, t = lane % 4;

  const int kblocks = a.kblocks, steps = 2 * kblocks;  // an item's half blocks, in the walk's order
  const int64_t m_tiles = E2M1 ? *a.tile_count : a.m_tiles, items = m_tiles * a.n_tiles;
  // The CTA's items are blockIdx.x + i gridDim.x; its steps run on across them (step i steps + j
  // is step j of item i), so the copies of an item's first stages overlap the last item's end.
  const int64_t my_items = items > blockIdx.x ? (items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int my_steps = static_cast<int>(my_items * steps);  // the host keeps it under 2^31
  // Items in groups of kRasterGroup x tiles, n tiles outermost within a group.
  const auto item_at = [&](int64_t i) {
    const int64_t id = blockIdx.x + i * gridDim.x, per_group = kRasterGroup * a.n_tiles;
    const int64_t first_m = id / per_group * kRasterGroup, in_group = id % per_group;
    const int64_t group_m = min(m_tiles - first_m, static_cast<int64_t>(kRasterGroup));
    const int64_t m_tile = first_m + in_group % group_m;
    WorkItem item;
    item.n0 = in_group / group_m * kTileRows;
    if constexpr (E2M1) {
      const Fp8MmaTile tile = a.tiles[m_tile];
      item.m0 = tile.row_begin;
      item.rows = tile.rows;
      item.group = tile.group;
    } else {
      item.m0 = m_tile * kTileRows;
      item.rows = static_cast<int>(min(static_cast<int64_t>(kTileRows), a.m - item.m0));
    }
    return item;
  };

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full0 + 8 * s, E2M1 ? 1 + kTileRows : 1);  // E2M1: the copies' arrival and each converter's
      barrier_init(empty0 + 8 * s, kWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp >= kWarps) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(F16WgmmaRegisters<E2M1>::kProducer) : "memory");
    // Its first lane issues the TMA loads; E2M1: thread `row` converts weight row `row` of every
    // stage.
    const int row = tid - kWarps * 32;
    const bool copies = row == 0, converts = E2M1;
    if (!copies && !converts) return;
    constexpr int kRawRing = E2M1 ? Layout::kRawBlocks : 1;
    // E2M1: K block `block` of the CTA (its walk over items) into raw ring slot block % kRawBlocks
    // (this thread's row only: it alone reads it). The row's codes and shifts of the item being
    // copied (nullptr past n) are found once an item, not once a block.
    int raw_local = 0;
    int64_t raw_item_i = 0;
    const uint8_t* row_codes = nullptr;
    const uint8_t* row_shifts = nullptr;
    const auto start_raw_item = [&](int64_t i) {
      const WorkItem it = item_at(i);
      const int64_t w_row = it.n0 + row;
      row_codes = w_row < a.n ? a.group_w[it.group] + w_row * (a.k / 2) : nullptr;
      row_shifts = w_row < a.n ? a.group_w_shift[it.group] + w_row * (a.k / 32) : nullptr;
    };
    if (converts && my_items > 0) start_raw_item(0);
    const auto* const unread = reinterpret_cast<const uint8_t*>(a.group_w);  // a source the copies that fill zeros name
    const auto copy_raw = [&](int block) {
      if (E2M1 && block < my_steps / 2) {
        const uint32_t slot =
            smem0 + Layout::kRaw + static_cast<uint32_t>((block % kRawRing) * Layout::kRawBlockBytes);
        const int b = staged_block_at(raw_local, kblocks);
        const bool valid = row_codes != nullptr;
#pragma unroll
        for (int c = 0; c < 4; ++c)
          cp_async16(slot + static_cast<uint32_t>(row * Layout::kRawRowBytes + 16 * (c ^ raw_swizzle(row))),
                     valid ? row_codes + b * Layout::kRawRowBytes + 16 * c : unread, valid);
        cp_async4(slot + static_cast<uint32_t>(Layout::kRawShifts + 4 * row), valid ? row_shifts + 4 * b : unread,
                  valid);
        if (++raw_local == kblocks) {
          raw_local = 0;
          if (++raw_item_i < my_items) start_raw_item(raw_item_i);
        }
      }
      cp_async_commit();
    };
    if (converts) {
      copy_raw(0);
      copy_raw(1);
    }
    int local = 0;
    int64_t item_i = 0;
    WorkItem item = my_items > 0 ? item_at(0) : WorkItem{};
    for (int step = 0; step < my_steps; ++step) {
      const int s = step % kStages, b = staged_block_at(local / 2, kblocks), half = local % 2;
      if (converts && half == 0) {  // this block's rows landed; the one two ahead starts
        copy_raw(step / 2 + 2);
        cp_async_wait<2>();
      }
      if (step >= kStages) barrier_wait(empty0 + 8 * s, static_cast<uint32_t>(step / kStages - 1) & 1u);
      const uint32_t stage = smem0 + static_cast<uint32_t>(s * kStageBytes), full = full0 + 8 * s;
      const int k0 = b * 128 + half * kStageK;
      if (copies) {  // E2M1: x and its scales (the converters write the w tile)
        constexpr int kOperandsBytes = (E2M1 ? 1 : 2) * kOperandBytes;
        constexpr int kScalesBytes = E2M1 ? 4 * kGroupedScaleRows : kScaleBytes;
        barrier_expect_bytes(full, kOperandsBytes + (half == 1 ? kScalesBytes : 0));
        if constexpr (!E2M1) tma_load(stage, w_map, k0, static_cast<int>(item.n0), full);
        tma_load(stage + kOperandBytes, x_map, k0, static_cast<int>(item.m0), full);
        if (half == 1)
          tma_load(stage + 2 * kOperandBytes, scale_map, static_cast<int>(E2M1 ? item.m0 & ~int64_t{3} : item.m0), b,
                   full);
      }
      if (converts) {
        const uint8_t* raw = smem + Layout::kRaw + ((step / 2) % kRawRing) * Layout::kRawBlockBytes;
        const uint32_t shifts = *reinterpret_cast<const uint32_t*>(raw + Layout::kRawShifts + 4 * row);
        convert_e2m1_half_row(raw + row * Layout::kRawRowBytes, shifts, smem + s * kStageBytes, row, half);
        // The tile was written through the generic proxy; the consumers' WGMMAs read through the async one.
        fence_async_proxy();
        barrier_arrive(full);
      }
      if (++local == steps) {
        local = 0;
        if (++item_i < my_items) item = item_at(item_i);
      }
    }
    if (converts) cp_async_wait<0>();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(F16WgmmaRegisters<E2M1>::kConsumer) : "memory");
  int step = 0;
  for (int64_t i = 0; i < my_items; ++i) {
    const WorkItem item = item_at(i);
    const float* sw_row = (E2M1 ? a.group_w_scale[item.group] : a.w_scale) + (item.n0 / kTileRows) * a.w_scale_ld;
    float sum[kWgmmaN128Accumulators], q[kWgmmaN128Accumulators], blk[kWgmmaN128Accumulators];
    for (int pass = 0; pass < 4; ++pass) {
#pragma unroll
      for (float& v : q) v = 0.0f;
      for (int b = pass; b < kblocks; b += 4, step += 2) {
        // E2M1: the w tile holds the cast's values times 2^-14, exactly; the scale takes it back.
        const float sw = E2M1 ? __ldg(sw_row + b) * kE2M1ScaleBack : __ldg(sw_row + b);
#pragma unroll
        for (float& v : blk) v = 0.0f;
        fence_accumulators(blk);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int s = (step + half) % kStages;
          barrier_wait(full0 + 8 * s, static_cast<uint32_t>((step + half) / kStages) & 1u);
          const uint32_t stage = smem0 + static_cast<uint32_t>(s * kStageBytes);
          const uint64_t desc_a = wgmma_descriptor(stage + static_cast<uint32_t>(wg * 64 * 128));
          const uint64_t desc_b = wgmma_descriptor(stage + kOperandBytes);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)  // MMA step 4 half + kk: 32 bytes of K, the descriptors move 2 x 16 bytes
            wgmma_m64n128k16_f16(blk, desc_a + 2 * kk, desc_b + 2 * kk);
          wgmma_commit();
        }
        wgmma_wait_all();
        fence_accumulators(blk);

        const int scale_stage = (step + 1) % kStages;
        // E2M1: the stage's scales start at the aligned row at or before the tile's first.
        const float* scales = reinterpret_cast<const float*>(smem + scale_stage * kStageBytes + 2 * kOperandBytes);
        add_scaled_block<!E2M1>(q, blk, scales + (E2M1 ? item.m0 % 4 : 0), sw, t);
        __syncwarp();
        if (lane == 0) {
          barrier_arrive(empty0 + 8 * (step % kStages));
          barrier_arrive(empty0 + 8 * scale_stage);
        }
      }
#pragma unroll
      for (int r = 0; r < kWgmmaN128Accumulators; ++r) sum[r] = pass == 0 ? q[r] : __fadd_rn(sum[r], q[r]);
    }

#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = 8 * j + 2 * t + (c & 1);
        const int64_t n = item.n0 + 64 * wg + 16 * warp_in_group + g + (c >= 2 ? 8 : 0);
        if (r < item.rows && n < a.n) store_float(a.y, (item.m0 + r) * a.ldy + n, sum[4 * j + c]);
      }
  }
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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

}  // namespace

void check_f16_wgmma_gemm(const Fp8MmaGemmParams& p) {
  const auto refuse = [](const std::string& why) { throw UsageError("fp8_mma_gemm: the f16-wgmma kernel " + why); };
  const bool grouped = p.tiles != nullptr;
  if (grouped && p.w_codes != Fp8MmaWeightCodes::kE2M1) refuse("takes grouped tiles of e2m1 weights only");
  if (!grouped && p.w_codes != Fp8MmaWeightCodes::kE4M3) refuse("takes dense calls of e4m3 weights only");
  if (grouped && (p.tile_count == nullptr || p.group_w == nullptr || p.group_w_shift == nullptr ||
                  p.group_w_scale == nullptr || p.tile_rows < 1 || p.tile_rows > kTileRows))
    refuse("needs a grouped call's tile count, weights, shifts, scales and tiles of 1 to 128 rows");
  if (p.second.n > 0) refuse("takes no second output");
  if (p.x16 == nullptr || (!grouped && p.w16 == nullptr))
    refuse("needs x16 and (dense) w16 (the operands e4m3_to_f16_mma_order writes)");
  if (!aligned16(p.x16) || !aligned16(p.w16) || !aligned16(p.x_scale))
    refuse("needs x16, w16 and x_scale 16-byte aligned");
  if (p.x_scale_ld % 4 != 0 || p.x_scale_ld < p.m)
    refuse("needs x_scale_ld a multiple of 4 and at least m (x_scale_ld=" + std::to_string(p.x_scale_ld) +
           ", m=" + std::to_string(p.m) + ")");
  if (p.k % 128 != 0) refuse("needs k a multiple of 128 (k=" + std::to_string(p.k) + ")");
}

void f16_wgmma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream) {
  const bool grouped = p.tiles != nullptr;
  if (p.m == 0 || p.n == 0 || p.k == 0 || (grouped && p.max_tiles == 0)) return;
  const auto k = static_cast<uint64_t>(p.k);
  const CUtensorMap x_map = tensor_map_2d("x16", p.x16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, k, static_cast<uint64_t>(p.m),
                                          2 * k, kStageK, kTileRows, CU_TENSOR_MAP_SWIZZLE_128B);
  // Grouped calls convert their e2m1 weights in the kernel; their w map is never read.
  const CUtensorMap w_map = grouped ? x_map
                                    : tensor_map_2d("w16", p.w16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, k,
                                                    static_cast<uint64_t>(p.n), 2 * k, kStageK, kTileRows,
                                                    CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap scale_map =
      tensor_map_2d("x_scale", p.x_scale, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(p.m), k / 128,
                    4 * static_cast<uint64_t>(p.x_scale_ld), grouped ? kGroupedScaleRows : kTileRows, 1,
                    CU_TENSOR_MAP_SWIZZLE_NONE);
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
  a.tiles = p.tiles;
  a.tile_count = p.tile_count;
  a.group_w = p.group_w;
  a.group_w_shift = p.group_w_shift;
  a.group_w_scale = p.group_w_scale;
  const int64_t ctas = std::min<int64_t>(a.m_tiles * a.n_tiles, current_device_sm_count());
  if ((a.m_tiles * a.n_tiles + ctas - 1) / ctas * 2 * a.kblocks > INT32_MAX)
    throw UsageError("fp8_mma_gemm: " + std::to_string(p.m) + " x " + std::to_string(p.n) + " x " +
                     std::to_string(p.k) + " is too large for one f16-wgmma call (split its rows)");
  const auto launch = [&](auto* kernel, int shared_bytes) {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
    launch_pdl(kernel, dim3(static_cast<unsigned>(ctas)), kThreads, shared_bytes, stream, w_map, x_map, scale_map, a);
  };
  if (grouped) launch(f16_wgmma_gemm_kernel<true>, F16WgmmaLayout<true>::kSharedBytes);
  else launch(f16_wgmma_gemm_kernel<false>, F16WgmmaLayout<false>::kSharedBytes);
}

void e4m3_to_f16_mma_order(const uint8_t* codes, uint16_t* out, int64_t rows, int64_t k, cudaStream_t stream) {
  if (k % 128 != 0) throw UsageError("e4m3_to_f16_mma_order: k=" + std::to_string(k) + " is not a multiple of 128");
  if (!aligned16(codes) || !aligned16(out)) throw UsageError("e4m3_to_f16_mma_order: codes and out must be 16-byte aligned");
  const int64_t blocks = rows * (k / 128);
  if (blocks == 0) return;
  launch_pdl(e4m3_to_f16_mma_order_kernel, dim3(static_cast<unsigned>((blocks + kConvertBlocks - 1) / kConvertBlocks)),
             kConvertThreads, 0, stream, codes, out, blocks);
}

}  // namespace dsv4::kernels
