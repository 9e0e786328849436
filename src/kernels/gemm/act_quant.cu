// Half a warp per (row, 128-wide K block), eight elements a thread: amax by shuffle, pow2 scale,
// e4m3 codes (or their fp16 values in the f16 WGMMA GEMM's layout). Each half-warp takes
// kTasksPerHalfWarp blocks and loads them all before it uses any, so more bytes are in flight
// (the block's max is exact in any order, so the codes are the same however the block is split).
// The rounding is core/numeric.h's, identical to the CPU reference: the hardware's e4m3x2
// conversion where it gives float_to_e4m3's codes (e4m3_cast.cuh), and the scaling by 2^-e a
// multiply (exact, as ldexpf is, where 2^-e is a normal float); a SwiGLU source computes each value
// as kernels::swiglu does (swiglu_value.cuh). Task indices are 32-bit (the host checks).
#include "kernels/gemm/act_quant.h"

#include <string>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/bf16_cast.cuh"
#include "kernels/cuda_check.h"
#include "kernels/e4m3_cast.cuh"
#include "kernels/gemm/mma_lanes.cuh"
#include "kernels/launch.cuh"
#include "kernels/moe/swiglu_value.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kTasksPerHalfWarp = 2;
constexpr int kHalfWarpsPerBlock = kThreadsPerBlock / 16;
// The most rows a scattered row goes to: each task loads its destinations with its x, so that
// they are not loaded one after another between its stores.
constexpr int64_t kMaxScatterFanout = 8;

// The eight bf16 values of a thread's 16 bytes, as floats.
__device__ __forceinline__ void unpack_bf16x8(const uint4& raw, float (&v)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = bf16_to_float(words[i] & 0xffff);
    v[2 * i + 1] = bf16_to_float(words[i] >> 16);
  }
}

// The codes of v[0..7] / 2^e, low byte first: with 2^-e a normal float (every block whose amax is
// finite) a multiply by it, which is ldexpf(v, -e) exactly; otherwise ldexpf itself.
__device__ __forceinline__ uint2 e4m3_codes(const float (&v)[8], int e) {
  uint32_t packed[2] = {0, 0};
  if (e > -127 && e < 127) {
    const float down = pow2(-e);
#pragma unroll
    for (int i = 0; i < 8; i += 2) packed[i / 4] |= float2_to_e4m3x2(v[i] * down, v[i + 1] * down) << (8 * (i % 4));
  } else {
#pragma unroll
    for (int i = 0; i < 8; i += 2)
      packed[i / 4] |= float2_to_e4m3x2(ldexpf(v[i], -e), ldexpf(v[i + 1], -e)) << (8 * (i % 4));
  }
  return make_uint2(packed[0], packed[1]);
}

// The rows of x a call quantises: m, or m / scatter_fanout with scatter_rows.
int64_t act_quant_source_rows(const ActQuantParams& p) {
  return p.scatter_rows != nullptr ? p.m / p.scatter_fanout : p.m;
}

// Where a row's values come from and go: x's row (or src_row's) to q's row, x's row to
// scatter_rows' rows (its own instantiation: the destinations' registers would cost the plain
// calls occupancy), or the SwiGLU of gate x and up to q's row.
enum class ActSource { kRows, kScatter, kSwiglu };

// A task row r < source_rows (act_quant_source_rows, from the host: a division there, not in
// every launch's threads) is x's row r; the rest are q's padding rows m.. in order.
template <ActSource kSource>
__global__ void __launch_bounds__(kThreadsPerBlock) act_quant_fp8_kernel(ActQuantParams p, int64_t source_rows) {
  pdl_wait();
  const int sub = threadIdx.x % 16;  // elements 8 sub .. 8 sub + 7 of a block
  const auto kblocks = static_cast<uint32_t>(p.k / 128);
  const auto tasks = static_cast<uint32_t>(source_rows + p.m_padded - p.m) * kblocks;
  const uint32_t half_warp = blockIdx.x * kHalfWarpsPerBlock + threadIdx.x / 16;
  const uint32_t half_warps = gridDim.x * kHalfWarpsPerBlock;
  // Task j of this half-warp: block (row, kb) = half_warp + j * half_warps in row-major order.
  uint4 raw[kTasksPerHalfWarp], raw_up[kTasksPerHalfWarp];
  uint32_t rows[kTasksPerHalfWarp], kbs[kTasksPerHalfWarp];
  int32_t dests[kTasksPerHalfWarp][kMaxScatterFanout];  // with scatter_rows: -1 past the fanout
#pragma unroll
  for (int j = 0; j < kTasksPerHalfWarp; ++j) {
    const uint32_t task = half_warp + j * half_warps;
    rows[j] = task / kblocks;
    kbs[j] = task - rows[j] * kblocks;
    const bool real = task < tasks && rows[j] < source_rows;
    const bool gathered = kSource == ActSource::kRows && p.src_row != nullptr;
    const int64_t src = real ? (gathered ? p.src_row[rows[j]] : int64_t{rows[j]}) : 0;
    const int64_t at = real ? src * p.k + kbs[j] * 128 + sub * 8 : 0;
    raw[j] = real ? *reinterpret_cast<const uint4*>(p.x + at) : make_uint4(0, 0, 0, 0);
    if constexpr (kSource == ActSource::kSwiglu)
      raw_up[j] = real ? *reinterpret_cast<const uint4*>(p.swiglu_up + at) : make_uint4(0, 0, 0, 0);
    if constexpr (kSource == ActSource::kScatter)
#pragma unroll
      for (int f = 0; f < kMaxScatterFanout; ++f)
        dests[j][f] =
            real && f < p.scatter_fanout ? __ldg(p.scatter_rows + int64_t{rows[j]} * p.scatter_fanout + f) : -1;
  }
#pragma unroll
  for (int j = 0; j < kTasksPerHalfWarp; ++j) {
    const uint32_t task = half_warp + j * half_warps;
    const int64_t row = rows[j], kb = kbs[j];
    float v[8];
    unpack_bf16x8(raw[j], v);
    if constexpr (kSource == ActSource::kSwiglu) {
      float up[8];
      unpack_bf16x8(raw_up[j], up);
      const float weight =
          p.swiglu_row_weight != nullptr && task < tasks && row < source_rows ? p.swiglu_row_weight[row] : 1.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float h = swiglu_value(v[i], up[i], p.swiglu_limit);
        if (p.swiglu_row_weight != nullptr) h = __fmul_rn(weight, h);
        v[i] = round_bf16(h);
      }
    }
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    for (int off = 8; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (task >= tasks) continue;
    const bool padding = row >= source_rows;  // padding rows: zeros with a unit scale
    const int e = padding ? 0 : pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max);
    const uint2 codes = padding ? make_uint2(0, 0) : e4m3_codes(v, e);
    const uint32_t packed[2] = {codes.x, codes.y};
    // The block's codes and scale into q's row `dest`.
    const auto write_row = [&](int64_t dest) {
      if (p.q16 != nullptr) {
        // The thread's codes (bytes 8 sub .. 8 sub + 7 of the block) are the block's code words
        // (t, s) = (sub / 4, 2 (sub % 4) + j), j = 0, 1 (word 8 t + s); word (t, s) goes to fp16
        // words 8 s + t (its low two codes) and 8 s + 4 + t (its high two), e4m3_to_f16_mma_order's layout.
        auto* const out = reinterpret_cast<uint32_t*>(p.q16 + dest * p.k + kb * 128);
        const int t = sub / 4;
        const auto value_pair = [&](uint32_t two_codes) {
          const uint32_t h = e4m3x2_to_f16x2(two_codes);
          if (!p.q16_bf16_scaled) return h;
          return f16x2_codes_to_scaled_bf16x2(h, ldexpf(1.0f, e));
        };
        if (p.q16_natural_order) {  // the thread's 8 values: words 4 sub .. 4 sub + 3 of the block
          *reinterpret_cast<uint4*>(out + 4 * sub) =
              make_uint4(value_pair(packed[0] & 0xffffu), value_pair(packed[0] >> 16), value_pair(packed[1] & 0xffffu),
                         value_pair(packed[1] >> 16));
        } else {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int s = 2 * (sub % 4) + j;
            out[8 * s + t] = value_pair(packed[j] & 0xffffu);
            out[8 * s + 4 + t] = value_pair(packed[j] >> 16);
          }
        }
      } else {
        *reinterpret_cast<uint2*>(p.q + dest * p.k + kb * 128 + sub * 8) = make_uint2(packed[0], packed[1]);
      }
      if (sub == 0) p.scale[kb * p.m_padded + dest] = ldexpf(1.0f, e);
    };
    if (padding) {
      write_row(p.m + (row - source_rows));
    } else if constexpr (kSource == ActSource::kScatter) {
#pragma unroll
      for (int f = 0; f < kMaxScatterFanout; ++f)
        if (dests[j][f] >= 0) write_row(dests[j][f]);
    } else {
      write_row(row);
    }
  }
}

}  // namespace

void act_quant_fp8(const ActQuantParams& p, cudaStream_t stream) {
  if (p.scatter_rows != nullptr && (p.scatter_fanout <= 0 || p.scatter_fanout > kMaxScatterFanout ||
                                    p.m % p.scatter_fanout != 0 || p.swiglu_up != nullptr || p.src_row != nullptr))
    throw UsageError("act_quant_fp8: scattering rows needs a fanout of 1.." + std::to_string(kMaxScatterFanout) +
                     " that divides m (m=" + std::to_string(p.m) + ", fanout " + std::to_string(p.scatter_fanout) +
                     ") and neither a SwiGLU source nor gathered rows");
  const int64_t source_rows = act_quant_source_rows(p);
  const int64_t tasks = (source_rows + p.m_padded - p.m) * (p.k / 128);
  // The kernel's task indices, and the grid's half-warps past the last task, stay in 32 bits.
  if (tasks + int64_t{kHalfWarpsPerBlock} * kTasksPerHalfWarp * kThreadsPerBlock >= (int64_t{1} << 32))
    throw UsageError("act_quant_fp8: " + std::to_string(p.m_padded) + " rows of " + std::to_string(p.k) +
                     " are too many for one call (split the rows)");
  constexpr int64_t kTasksPerBlock = int64_t{kHalfWarpsPerBlock} * kTasksPerHalfWarp;
  const auto blocks = static_cast<unsigned>((tasks + kTasksPerBlock - 1) / kTasksPerBlock);
  if (blocks == 0) return;
  if (p.swiglu_up != nullptr)
    launch_pdl(act_quant_fp8_kernel<ActSource::kSwiglu>, blocks, kThreadsPerBlock, 0, stream, p, source_rows);
  else if (p.scatter_rows != nullptr)
    launch_pdl(act_quant_fp8_kernel<ActSource::kScatter>, blocks, kThreadsPerBlock, 0, stream, p, source_rows);
  else
    launch_pdl(act_quant_fp8_kernel<ActSource::kRows>, blocks, kThreadsPerBlock, 0, stream, p, source_rows);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
