// fp8_mma_gemm's kF16Wgmma: the staged kernel's arithmetic (fp8_mma_gemm.h's summation order) on
// Hopper's fp16 WGMMA, fed by TMA, for prefill-sized dense GEMMs.
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
#include "kernels/gemm/f16_wgmma_gemm.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
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
constexpr int kStageBytes = 2 * kOperandBytes + 1024;  // w, x, x scales (512 B, padded: tiles stay 1024-aligned)
constexpr int kSharedBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;  // + alignment, full and empty barriers
constexpr int kRasterGroup = 8;
// setmaxnreg's registers a thread: the producer warpgroup gives up what the consumers take. The CTA
// holds kThreads x 168 registers (ptxas's cap for 384 threads), and a setmaxnreg.inc asking for
// more than the CTA holds waits for ever (the grouped e2m1 experiment's 80 / 216 hung: PERF.md
// session 21), so the two must fit in it.
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
static_assert(128 * kProducerRegisters + kWarps * 32 * kConsumerRegisters <= kThreads * 168,
              "f16_wgmma_gemm: setmaxnreg asks for more registers than the CTA holds");
static_assert(kSharedBytes <= 227 * 1024, "f16_wgmma_gemm's shared memory exceeds Hopper's 227 KiB");

struct F16WgmmaArgs {
  const float* w_scale = nullptr;
  int64_t w_scale_ld = 0;
  MutFloatPtr y;
  int64_t ldy = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t m_tiles = 0;
  int64_t n_tiles = 0;
  int kblocks = 0;
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

__global__ void __launch_bounds__(kThreads, 1)
    f16_wgmma_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                          const __grid_constant__ CUtensorMap scale_map, const F16WgmmaArgs a) {
  pdl_wait();
  extern __shared__ uint8_t f16_wgmma_smem_raw[];
  uint8_t* const smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(f16_wgmma_smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t smem0 = shared_address(smem);
  const uint32_t full0 = smem0 + kStages * kStageBytes, empty0 = full0 + kStages * 8;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, warp_in_group = warp % 4;
  const int g = lane / 4, t = lane % 4;

  const int kblocks = a.kblocks, steps = 2 * kblocks;  // a tile's half blocks, in the walk's order
  const int64_t tiles = a.m_tiles * a.n_tiles;
  // The CTA's tiles are blockIdx.x + i gridDim.x; its steps run on across them (step i steps + j
  // is step j of tile i), so the copies of a tile's first stages overlap the last tile's end.
  const int64_t my_tiles = (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int my_steps = static_cast<int>(my_tiles * steps);  // the host keeps it under 2^31
  const auto tile_origin = [&](int64_t i, int64_t& m0, int64_t& n0) {
    const int64_t id = blockIdx.x + i * gridDim.x, per_group = kRasterGroup * a.n_tiles;
    const int64_t first_m = id / per_group * kRasterGroup, in_group = id % per_group;
    const int64_t group_m = min(a.m_tiles - first_m, static_cast<int64_t>(kRasterGroup));
    m0 = (first_m + in_group % group_m) * kTileRows;
    n0 = in_group / group_m * kTileRows;
  };

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full0 + 8 * s, 1);
      barrier_init(empty0 + 8 * s, kWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp >= kWarps) {  // the producer warpgroup: its first lane issues every step's copies once the stage is free
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters) : "memory");
    if (warp == kWarps && lane == 0) {
      int local = 0;
      int64_t tile = 0, m0 = 0, n0 = 0;
      tile_origin(0, m0, n0);
      for (int step = 0; step < my_steps; ++step) {
        const int s = step % kStages;
        if (step >= kStages) barrier_wait(empty0 + 8 * s, static_cast<uint32_t>(step / kStages - 1) & 1u);
        const int b = staged_block_at(local / 2, kblocks), half = local % 2;
        const uint32_t stage = smem0 + static_cast<uint32_t>(s * kStageBytes), full = full0 + 8 * s;
        const int k0 = b * 128 + half * kStageK;
        barrier_expect_bytes(full, 2 * kOperandBytes + (half == 1 ? kScaleBytes : 0));
        tma_load(stage, w_map, k0, static_cast<int>(n0), full);
        tma_load(stage + kOperandBytes, x_map, k0, static_cast<int>(m0), full);
        if (half == 1) tma_load(stage + 2 * kOperandBytes, scale_map, static_cast<int>(m0), b, full);
        if (++local == steps) {
          local = 0;
          if (++tile < my_tiles) tile_origin(tile, m0, n0);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters) : "memory");
  int step = 0;
  for (int64_t i = 0; i < my_tiles; ++i) {
    int64_t m0, n0;
    tile_origin(i, m0, n0);
    const float* sw_row = a.w_scale + (n0 / kTileRows) * a.w_scale_ld;
    float sum[kWgmmaN128Accumulators], q[kWgmmaN128Accumulators], blk[kWgmmaN128Accumulators];
    for (int pass = 0; pass < 4; ++pass) {
#pragma unroll
      for (float& v : q) v = 0.0f;
      for (int b = pass; b < kblocks; b += 4, step += 2) {
        const float sw = __ldg(sw_row + b);
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
        add_scaled_block(q, blk, reinterpret_cast<const float*>(smem + scale_stage * kStageBytes + 2 * kOperandBytes),
                         sw, t);
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
        const int64_t r = m0 + 8 * j + 2 * t + (c & 1);
        const int64_t n = n0 + 64 * wg + 16 * warp_in_group + g + (c >= 2 ? 8 : 0);
        if (r < a.m && n < a.n) store_float(a.y, r * a.ldy + n, sum[4 * j + c]);
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
  if (p.tiles != nullptr) refuse("takes dense calls only, not grouped tiles");
  if (p.w_codes != Fp8MmaWeightCodes::kE4M3) refuse("takes e4m3 weights only");
  if (p.second.n > 0) refuse("takes no second output");
  if (p.x16 == nullptr || p.w16 == nullptr) refuse("needs x16 and w16 (e4m3_to_f16_mma_order's operands)");
  if (!aligned16(p.x16) || !aligned16(p.w16) || !aligned16(p.x_scale))
    refuse("needs x16, w16 and x_scale 16-byte aligned");
  if (p.x_scale_ld % 4 != 0 || p.x_scale_ld < p.m)
    refuse("needs x_scale_ld a multiple of 4 and at least m (x_scale_ld=" + std::to_string(p.x_scale_ld) +
           ", m=" + std::to_string(p.m) + ")");
  if (p.k % 128 != 0) refuse("needs k a multiple of 128 (k=" + std::to_string(p.k) + ")");
}

void f16_wgmma_gemm(const Fp8MmaGemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0 || p.k == 0) return;
  const auto k = static_cast<uint64_t>(p.k);
  const CUtensorMap w_map = tensor_map_2d("w16", p.w16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, k, static_cast<uint64_t>(p.n),
                                          2 * k, kStageK, kTileRows, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap x_map = tensor_map_2d("x16", p.x16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, k, static_cast<uint64_t>(p.m),
                                          2 * k, kStageK, kTileRows, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap scale_map =
      tensor_map_2d("x_scale", p.x_scale, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(p.m), k / 128,
                    4 * static_cast<uint64_t>(p.x_scale_ld), kTileRows, 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  F16WgmmaArgs a;
  a.w_scale = p.w_scale;
  a.w_scale_ld = p.w_scale_ld;
  a.y = p.y;
  a.ldy = p.ldy;
  a.m = p.m;
  a.n = p.n;
  a.m_tiles = (p.m + kTileRows - 1) / kTileRows;
  a.n_tiles = (p.n + kTileRows - 1) / kTileRows;
  a.kblocks = static_cast<int>(p.k / 128);
  const int64_t ctas = std::min<int64_t>(a.m_tiles * a.n_tiles, current_device_sm_count());
  if ((a.m_tiles * a.n_tiles + ctas - 1) / ctas * 2 * a.kblocks > INT32_MAX)
    throw UsageError("fp8_mma_gemm: " + std::to_string(p.m) + " x " + std::to_string(p.n) + " x " +
                     std::to_string(p.k) + " is too large for one f16-wgmma call (split its rows)");
  DSV4_CUDA_CHECK(
      cudaFuncSetAttribute(f16_wgmma_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  launch_pdl(f16_wgmma_gemm_kernel, dim3(static_cast<unsigned>(ctas)), kThreads, kSharedBytes, stream, w_map, x_map,
             scale_map, a);
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
