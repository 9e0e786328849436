// Elementwise and per-row kernels of CudaOps (see elementwise.h). Products and sums that the CPU
// rounds one by one use the _rn intrinsics, which nvcc never fuses into an FMA.
#include "kernels/elementwise/elementwise.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/attention/pack_entries.cuh"
#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.h"
#include "kernels/e4m3_cast.cuh"
#include "kernels/elementwise/rms_norm_scale.cuh"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__global__ void convert_copy_kernel(ConvertCopyParams p) {
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_float(p.dst, i, load_float(p.src, i));
}

__global__ void embed_gather_kernel(EmbedGatherParams p) {
  pdl_wait();
  const int64_t row = blockIdx.x;  // t * streams + j
  const int32_t id = p.ids[row / p.streams];
  const bool valid = id >= 0 && id < p.vocab;
  if (!valid && threadIdx.x == 0 && atomicCAS(p.fault, 0, kFaultTokenId) == 0) p.fault[1] = id;
  for (int64_t d = threadIdx.x; d < p.dim; d += blockDim.x)
    store_float(p.out, row * p.dim + d, valid ? load_float(p.table, id * p.dim + d) : 0.0f);
}

__global__ void broadcast_add_kernel(BroadcastAddParams p) {
  pdl_wait();
  const int64_t n = p.tokens * p.streams * p.dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / (p.streams * p.dim), d = i % p.dim;
    store_float(p.out, i, __fadd_rn(load_float(p.a, i), load_float(p.b, t * p.dim + d)));
  }
}

__global__ void rms_norm_kernel(RmsNormRowsParams p) {
  pdl_wait();
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * p.dim;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    const float v = load_float(p.x, base + i);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, scratch);
  const float inv = rms_norm_scale(ss, p.dim, p.eps);
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    const float v = __fmul_rn(load_float(p.x, base + i), inv);
    store_float(p.y, base + i, p.weight.data ? __fmul_rn(load_float(p.weight, i), v) : v);
  }
}

// rms_norm_kernel's arithmetic for the few rows of a decode step, where each norm is a chain of
// dependent memory round trips: a thread's V values of the row (and the weight's, which no kernel
// writes, fetched before the wait) are loaded at once and kept in registers, instead of one value
// a loop iteration, read twice. The same operations in the same order: rms_norm_kernel's bits.
// Held to few rows: at 1,024 threads a block its registers allow one block an SM, which made the
// 8k prefill's norms 57% slower (docs/PERF.md, session 28).
constexpr int64_t kNormRegsMaxRows = 256;
constexpr int kNormRegsMaxValues = 8;

template <int V>
__global__ void rms_norm_regs_kernel(RmsNormRowsParams p) {
  const auto tid = static_cast<int64_t>(threadIdx.x), threads = static_cast<int64_t>(blockDim.x);
  float w[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t i = tid + v * threads;
    w[v] = p.weight.data != nullptr && i < p.dim ? load_float(p.weight, i) : 1.0f;
  }
  pdl_wait();
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * p.dim;
  float x[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t i = tid + v * threads;
    x[v] = i < p.dim ? load_float(p.x, base + i) : 0.0f;
  }
  float ss = 0;
#pragma unroll
  for (int v = 0; v < V; ++v)
    if (tid + v * threads < p.dim) ss = fmaf(x[v], x[v], ss);
  ss = block_sum(ss, scratch);
  const float inv = rms_norm_scale(ss, p.dim, p.eps);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t i = tid + v * threads;
    if (i >= p.dim) continue;
    const float y = __fmul_rn(x[v], inv);
    store_float(p.y, base + i, p.weight.data != nullptr ? __fmul_rn(w[v], y) : y);
  }
}

// Rows whose rms_norm_kernel block would have V * 32 <= 256 threads with at most four values each
// (the per-head q norm's hundreds of thousands of 512-wide rows, the kv and q norms): a warp per
// row does that block's arithmetic, lane l standing in for threads w * 32 + l (w < V). Each of
// those sums its values w * 32 + l + c * V * 32 (c = 0..3) in the same order, each virtual warp's
// sum takes the same butterfly, and the V sums are added in order from 0: rms_norm_kernel's bits,
// without blocks of 32-256 threads each paying a block's start and a __syncthreads.
// Below kNormWarpMinRows rows the block per row is faster (more threads in flight for few rows):
// on the H200 the 512-wide per-head q norm took 0.15 ms per step on blocks and 0.19 on warps at
// 1,024 rows, 0.33 and 0.21 at 4,096, and a single row took 2.8 us on a block and 6 on a warp.
constexpr int kNormValuesPerThread = 4;
constexpr int kNormWarpRowsPerBlock = 8;
constexpr int64_t kNormWarpMinRows = 4096;

template <int V>
__global__ void rms_norm_warp_kernel(RmsNormRowsParams p) {
  pdl_wait();
  constexpr int kRowThreads = V * 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kNormWarpRowsPerBlock) + threadIdx.x / 32;
  if (row >= p.rows) return;  // the whole warp
  const int64_t base = row * p.dim;
  float v[V][kNormValuesPerThread], ss[V];
#pragma unroll
  for (int w = 0; w < V; ++w) {
    ss[w] = 0;
#pragma unroll
    for (int c = 0; c < kNormValuesPerThread; ++c) {
      const int64_t i = w * 32 + lane + static_cast<int64_t>(c) * kRowThreads;
      v[w][c] = i < p.dim ? load_float(p.x, base + i) : 0.0f;
      if (i < p.dim) ss[w] = fmaf(v[w][c], v[w][c], ss[w]);
    }
  }
  float total = 0;
#pragma unroll
  for (int w = 0; w < V; ++w) {
    for (int off = 16; off > 0; off /= 2) ss[w] += __shfl_xor_sync(0xffffffffu, ss[w], off);
    total += ss[w];
  }
  const float inv = rms_norm_scale(total, p.dim, p.eps);
#pragma unroll
  for (int w = 0; w < V; ++w)
#pragma unroll
    for (int c = 0; c < kNormValuesPerThread; ++c) {
      const int64_t i = w * 32 + lane + static_cast<int64_t>(c) * kRowThreads;
      if (i >= p.dim) continue;
      const float y = __fmul_rn(v[w][c], inv);
      store_float(p.y, base + i, p.weight.data ? __fmul_rn(load_float(p.weight, i), y) : y);
    }
}

// Rows whose rms_norm_kernel block has 1,024 threads (dim >= 3,972: V4's hidden rows, the mHC
// pre-norms of every prefill token) with up to kNormWideMaxValues values each, at prefill sizes:
// 256 threads a row, thread j standing in for threads j + 256 m (m = 0..3) with their values in
// registers. Virtual warp w + 8 m is real warp w's m-th butterfly, and the 32 warp sums are added
// in warp order as block_sum adds them: rms_norm_kernel's bits, with four times the rows an SM in
// flight and x read once (the 1,024-thread blocks, each waiting on its block_sum with x read
// twice, ran an 8k prefill's 8,192 x 4,096 norms at ~4x their memory floor: docs/PERF.md).
constexpr int kNormWideThreads = 256;
constexpr int kNormWideVirtual = 4;  // virtual threads a real one: a 1,024-thread block
constexpr int kNormWideBlock = kNormWideThreads * kNormWideVirtual;
constexpr int kNormWideMaxValues = 8;

template <int V>
__global__ void __launch_bounds__(kNormWideThreads) rms_norm_wide_kernel(RmsNormRowsParams p) {
  pdl_wait();
  __shared__ float warp_sums[kNormWideBlock / 32];
  const int j = static_cast<int>(threadIdx.x), warp = j / 32, lane = j % 32;
  const int64_t base = blockIdx.x * p.dim;
  const int dim = static_cast<int>(p.dim);  // under 8 x 1,024
  float x[kNormWideVirtual][V];
  // The row's values, its dtype tested once (a test a load held more registers: V = 7 spilled).
  const auto load_row = [&](const auto* row, auto to_float) {
#pragma unroll
    for (int m = 0; m < kNormWideVirtual; ++m)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int i = j + kNormWideThreads * m + kNormWideBlock * v;
        x[m][v] = i < dim ? to_float(row[i]) : 0.0f;
      }
  };
  if (p.x.bf16) load_row(static_cast<const uint16_t*>(p.x.data) + base, [](uint16_t b) { return bf16_to_float(b); });
  else load_row(static_cast<const float*>(p.x.data) + base, [](float f) { return f; });
#pragma unroll
  for (int m = 0; m < kNormWideVirtual; ++m) {
    float ss = 0;
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (j + kNormWideThreads * m + kNormWideBlock * v < dim) ss = fmaf(x[m][v], x[m][v], ss);
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) warp_sums[warp + (kNormWideThreads / 32) * m] = ss;
  }
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kNormWideBlock / 32; ++w) total += warp_sums[w];
  const float inv = rms_norm_scale(total, p.dim, p.eps);
#pragma unroll
  for (int m = 0; m < kNormWideVirtual; ++m)
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int i = j + kNormWideThreads * m + kNormWideBlock * v;
      if (i >= dim) continue;
      const float y = __fmul_rn(x[m][v], inv);
      store_float(p.y, base + i, p.weight.data ? __fmul_rn(load_float(p.weight, i), y) : y);
    }
}

// Block (r, g) rotates heads [g * heads_per_block, ..) of row r, each block computing the row's
// angles. A decode step's rows take groups of heads that give each thread one unit (a pair, or a
// run of four: rope_kernel; a 64-head row in one block was 8 pairs a thread, one after another);
// prefill rows keep a block a row, which computes each row's sines once.
constexpr int64_t kRopeSplitMaxRows = 256;

// The rotation's cosine and sine for a position and frequency: the product in fp32, cos and sin
// in double rounded to fp32, as the CPU computes them.
__device__ __forceinline__ float2 rope_cos_sin(int32_t position, float inv_freq) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
  double s, c;
  sincos(static_cast<double>(angle), &s, &c);
  return make_float2(static_cast<float>(c), static_cast<float>(s));
}

// The pair (a, b) rotated by (cs, sn), each product and sum rounded on its own.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float cs, float sn) {
  return make_float2(__fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn)), __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, cs)));
}

// Whether a rotation takes its pairs four at a time (rope_kernel<true>): the rotated values of every
// head in 16-byte aligned runs of 8 (x 16-byte aligned, rope_dim and head_dim multiples of 8), as
// the model's rows are (64 of 512). Each run is a 16-byte load and store instead of eight scalar
// accesses, its indices 32-bit (the host checks the row's size).
bool rope_takes_runs(const RopeRowsParams& p) {
  return aligned16(p.x.data) && p.rope_dim % 8 == 0 && p.head_dim % 8 == 0 &&
         p.heads * p.head_dim < (int64_t{1} << 31);
}

// The angles come before the PDL wait (positions and inv_freq are no kernel's output): a decode
// row's sines and cosines, double precision with the large arguments' reduction, run while the
// kernel before finishes instead of on the chain after it. A thread's unit is a pair, or with
// kRuns a run of four pairs (rope_takes_runs): the same rotation and rounding either way.
template <bool kRuns>
__global__ void rope_kernel(RopeRowsParams p, int64_t heads_per_block) {
  extern __shared__ float trig[];  // cos[half], then sin[half]
  const int64_t half = p.rope_dim / 2, r = blockIdx.x;
  const int64_t first_head = blockIdx.y * heads_per_block;
  const int64_t end_head = first_head + heads_per_block < p.heads ? first_head + heads_per_block : p.heads;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 cs = rope_cos_sin(p.positions[r], p.inv_freq[i]);
    trig[i] = cs.x;
    trig[half + i] = p.inverse ? -cs.y : cs.y;
  }
  pdl_wait();
  __syncthreads();
  if constexpr (kRuns) {
    const int runs = static_cast<int>(half / 4);  // a head's
    const int head_dim = static_cast<int>(p.head_dim), skip = static_cast<int>(p.head_dim - p.rope_dim);
    const int64_t row = r * p.heads * p.head_dim;
    for (int u = static_cast<int>(first_head) * runs + static_cast<int>(threadIdx.x);
         u < static_cast<int>(end_head) * runs; u += static_cast<int>(blockDim.x)) {
      const int h = u / runs, i0 = 4 * (u - h * runs);
      const int64_t off = row + h * head_dim + skip + 2 * i0;
      float v[8];
      load_float8(FloatPtr{p.x.data, p.x.bf16}, off, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 rotated = rope_rotate(v[2 * j], v[2 * j + 1], trig[i0 + j], trig[half + i0 + j]);
        v[2 * j] = rotated.x;
        v[2 * j + 1] = rotated.y;
      }
      store_float8(p.x, off, v);
    }
  } else {
    for (int64_t q = first_head * half + threadIdx.x; q < end_head * half; q += blockDim.x) {
      const int64_t h = q / half, i = q % half;
      const int64_t off = (r * p.heads + h) * p.head_dim + p.head_dim - p.rope_dim + 2 * i;
      const float2 rotated = rope_rotate(load_float(p.x, off), load_float(p.x, off + 1), trig[i], trig[half + i]);
      store_float(p.x, off, rotated.x);
      store_float(p.x, off + 1, rotated.y);
    }
  }
}

// A quantisation block's rounding onto its grid, given the block's amax: the CPU's ldexpf
// scalings as multiplies by exact powers of two where 2^-e and 2^e are normal floats (every block
// whose amax is finite; decided once a block, not predicated in every element), and e4m3's
// rounding on the hardware conversion (e4m3_cast.cuh): the CPU's bits.
struct BlockRounding {
  int e;
  bool e2m1, normal;
  float down, up;

  __device__ __forceinline__ BlockRounding(float amax, bool is_e2m1)
      : e(is_e2m1 ? pow2_scale_exponent(amax, kFp4AmaxFloor, kE2M1Max)
                  : pow2_scale_exponent(amax, kFp8AmaxFloor, kE4M3Max)),
        e2m1(is_e2m1),
        normal(e > -127 && e < 127),
        down(normal ? pow2(-e) : 0.0f),
        up(normal ? pow2(e) : 0.0f) {}

  __device__ __forceinline__ float operator()(float x) const {
    if (normal) {
      const float scaled = x * down;
      return (e2m1 ? round_e2m1(scaled) : round_e4m3_fast(scaled)) * up;
    }
    const float scaled = ldexpf(x, -e);
    return ldexpf(e2m1 ? round_e2m1(scaled) : round_e4m3(scaled), e);
  }
};

// A warp per (row, block); a lane's values of a block of up to kQuantSimValues * 32 are loaded at
// once and kept in registers for the rounding (wider blocks are read again, a value an iteration).
constexpr int kQuantSimValues = 4;

// The largest magnitude of a lane's values (those past the block are zeros) and of a warp's.
__device__ __forceinline__ float lane_amax(const float (&v)[kQuantSimValues]) {
  float amax = 0;
#pragma unroll
  for (const float x : v) amax = fmaxf(amax, fabsf(x));
  return amax;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__global__ void quant_sim_kernel(QuantSimRowsParams p) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t blocks_per_row = (p.cols + p.block - 1) / p.block;
  const int64_t tasks = p.rows * blocks_per_row;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const bool in_registers = p.block <= kQuantSimValues * 32;
  for (int64_t task = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; task < tasks;
       task += warps) {
    const int64_t r = task / blocks_per_row, b0 = (task % blocks_per_row) * p.block;
    const int64_t len = min(p.block, p.cols - b0);
    const int64_t base = r * p.width + b0;
    float v[kQuantSimValues];
    float amax = 0;
    if (in_registers) {
#pragma unroll
      for (int c = 0; c < kQuantSimValues; ++c) v[c] = lane + 32 * c < len ? load_float(p.x, base + lane + 32 * c) : 0.0f;
      amax = lane_amax(v);
    } else {
      for (int64_t i = lane; i < len; i += 32) amax = fmaxf(amax, fabsf(load_float(p.x, base + i)));
    }
    const BlockRounding rounded(warp_max(amax), p.e2m1);
    if (in_registers) {
#pragma unroll
      for (int c = 0; c < kQuantSimValues; ++c)
        if (lane + 32 * c < len) store_float(p.x, base + lane + 32 * c, rounded(v[c]));
    } else {
      for (int64_t i = lane; i < len; i += 32) store_float(p.x, base + i, rounded(load_float(p.x, base + i)));
    }
  }
}

// quant_sim_kernel's arithmetic with a lane per 8 consecutive values (one 16-byte load of bf16, two
// of fp32) and a block's lanes side by side in a warp, for blocks of 8 to 256 values that tile the
// quantised columns (quant_sim_lanes_fit): a prefill's indexer q (blocks of 32) had a lane a value
// and a warp a block. A block's amax is the largest magnitude of its values in any order, and each
// value is rounded on its own, so the same bits.
constexpr int kQuantSimLaneValues = 8;

template <bool kBf16>
__global__ void quant_sim_lanes_kernel(QuantSimRowsParams p) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int block_lanes = static_cast<int>(p.block / kQuantSimLaneValues);  // a power of two, 1..32
  const int64_t row_pieces = p.cols / kQuantSimLaneValues, pieces = p.rows * row_pieces;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; warp * 32 < pieces;
       warp += warps) {
    const int64_t piece = warp * 32 + lane;
    const bool valid = piece < pieces;
    const int64_t at = valid ? piece / row_pieces * p.width + piece % row_pieces * kQuantSimLaneValues : 0;
    float v[kQuantSimLaneValues] = {};
    if (valid) load_float8(FloatPtr{p.x.data, kBf16}, at, v);
    float amax = 0;
#pragma unroll
    for (int i = 0; i < kQuantSimLaneValues; ++i) amax = fmaxf(amax, fabsf(v[i]));
    for (int off = block_lanes / 2; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (!valid) continue;
    const BlockRounding rounded(amax, p.e2m1);
#pragma unroll
    for (float& x : v) x = rounded(x);
    store_float8(MutFloatPtr{p.x.data, kBf16}, at, v);
  }
}

// Whether quant_sim_lanes_kernel takes the call: blocks of 8 to 256 values (a power of two) that
// tile the columns, every piece of 8 values 16-byte aligned.
bool quant_sim_lanes_fit(const QuantSimRowsParams& p) {
  const int64_t elem = p.x.bf16 ? 2 : 4;
  const bool power_of_two = p.block >= kQuantSimLaneValues && p.block <= 256 && (p.block & (p.block - 1)) == 0;
  return power_of_two && p.cols % p.block == 0 && (p.width * elem) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.x.data) % 16 == 0;
}

// The transform's butterflies over a block's shared row of n values (a power of two), stage by
// stage as the CPU runs them: a + b and a - b, unscaled. Every thread calls it; ends synchronised.
__device__ __forceinline__ void block_hadamard_stages(float* row, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t q = threadIdx.x; q < n / 2; q += blockDim.x) {
      const int64_t j = (q / h) * 2 * h + q % h;
      const float a = row[j], b = row[j + h];
      row[j] = __fadd_rn(a, b);
      row[j + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
}

__global__ void hadamard_kernel(HadamardRowsParams p) {
  pdl_wait();
  extern __shared__ float row[];
  const int64_t n = p.width, base = blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] = load_float(p.x, base + i);
  __syncthreads();
  block_hadamard_stages(row, n);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) store_float(p.x, base + i, __fmul_rn(row[i], p.scale));
}

// The same transform with a warp per row of E * 32 elements, lane l holding elements E l ..
// E l + E - 1 in registers: pairs closer than E meet inside a lane, farther ones across lanes
// (the lower element's lane adds, the upper's subtracts), the same two operations on the same
// values as hadamard_kernel, without its block-wide barriers per stage.
template <int E>
__global__ void hadamard_warp_kernel(HadamardRowsParams p) {
  pdl_wait();
  constexpr int kWidth = E * 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kThreads / 32) + threadIdx.x / 32;
  if (row >= p.rows) return;  // the whole warp
  const int64_t base = row * kWidth + lane * E;
  float v[E];
#pragma unroll
  for (int l = 0; l < E; ++l) v[l] = load_float(p.x, base + l);
#pragma unroll
  for (int h = 1; h < E; h *= 2)
#pragma unroll
    for (int l = 0; l < E; ++l)
      if (l % (2 * h) < h) {
        const float a = v[l], b = v[l + h];
        v[l] = __fadd_rn(a, b);
        v[l + h] = __fsub_rn(a, b);
      }
#pragma unroll
  for (int h = E; h < kWidth; h *= 2) {
    const int lanes_apart = h / E;
    const bool upper = (lane & lanes_apart) != 0;
#pragma unroll
    for (int l = 0; l < E; ++l) {
      const float other = __shfl_xor_sync(0xffffffffu, v[l], lanes_apart);
      v[l] = upper ? __fsub_rn(other, v[l]) : __fadd_rn(v[l], other);
    }
  }
#pragma unroll
  for (int l = 0; l < E; ++l) store_float(p.x, base + l, __fmul_rn(v[l], p.scale));
}

// v as y stores it: what the next op of a chain reads back.
__device__ __forceinline__ float stored(MutFloatPtr y, float v) { return y.bf16 ? round_bf16(v) : v; }

// norm_rope_quant_rows' launch: block b takes vector b in rms_norm_block_threads(dim) threads, its
// values in registers for the norm (rms_norm_regs_kernel's loads and sums: thread t holds values
// t + v * threads), then in a shared row for the rotation (rope_kernel's pairs), the transform
// (hadamard_kernel's stages) and the rounding (quant_sim_kernel's warp a block), each step's
// results rounded to y's dtype where its own kernel stores them.
template <int V>
__global__ void norm_rope_quant_kernel(NormRopeQuantRowsParams p) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int dim = static_cast<int>(p.dim);
  const int64_t vector = blockIdx.x, base = vector * p.dim;
  // The norm's weight and the rotation's angles before the PDL wait (no kernel writes them): the
  // sines and cosines (double precision, the large arguments' reduction) run while the kernel
  // before finishes, not on the chain after it.
  float w[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int i = tid + v * threads;
    w[v] = p.norm_weight.data != nullptr && i < dim ? load_float(p.norm_weight, i) : 1.0f;
  }
  __shared__ float2 trig[kNormRopeQuantMaxDim / 2];
  const int half = static_cast<int>(p.rope_dim / 2);
  if (half > 0) {
    const int32_t position = p.positions[vector / p.heads];
    for (int i = tid; i < half; i += threads) trig[i] = rope_cos_sin(position, p.inv_freq[i]);
  }
  pdl_wait();
  __shared__ float scratch[32];
  __shared__ float row[kNormRopeQuantMaxDim];
  float x[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int i = tid + v * threads;
    x[v] = i < dim ? stored(p.y, load_float(p.src, base + i)) : 0.0f;
  }
  if (p.norm) {
    float ss = 0;
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (tid + v * threads < dim) ss = fmaf(x[v], x[v], ss);
    ss = block_sum(ss, scratch);
    const float inv = rms_norm_scale(ss, p.dim, p.eps);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float y = __fmul_rn(x[v], inv);
      x[v] = stored(p.y, p.norm_weight.data != nullptr ? __fmul_rn(w[v], y) : y);
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v)
    if (tid + v * threads < dim) row[tid + v * threads] = x[v];
  __syncthreads();
  if (half > 0) {
    for (int i = tid; i < half; i += threads) {
      const int at = dim - 2 * half + 2 * i;
      const float2 rotated = rope_rotate(row[at], row[at + 1], trig[i].x, trig[i].y);
      row[at] = stored(p.y, rotated.x);
      row[at + 1] = stored(p.y, rotated.y);
    }
    __syncthreads();
  }
  if (p.hadamard_scale != 0.0f) {
    block_hadamard_stages(row, dim);
    for (int i = tid; i < dim; i += threads) row[i] = stored(p.y, __fmul_rn(row[i], p.hadamard_scale));
    __syncthreads();
  }
  if (p.quant_cols > 0) {
    const int lane = tid % 32, block = static_cast<int>(p.quant_block);
    for (int b0 = tid / 32 * block; b0 < p.quant_cols; b0 += threads / 32 * block) {
      float v[kQuantSimValues];
#pragma unroll
      for (int c = 0; c < kQuantSimValues; ++c) v[c] = lane + 32 * c < block ? row[b0 + lane + 32 * c] : 0.0f;
      const BlockRounding rounded(warp_max(lane_amax(v)), p.quant_e2m1);
#pragma unroll
      for (int c = 0; c < kQuantSimValues; ++c)
        if (lane + 32 * c < block) row[b0 + lane + 32 * c] = stored(p.y, rounded(v[c]));
    }
    __syncthreads();
  }
  for (int i = tid; i < dim; i += threads) store_float(p.y, base + i, row[i]);
}

}  // namespace

// The block copies `bytes` bytes, in 16-byte words where both ends and the length allow.
__device__ void block_copy_bytes(void* dst, const void* src, int64_t bytes) {
  const auto s_at = reinterpret_cast<uintptr_t>(src), d_at = reinterpret_cast<uintptr_t>(dst);
  if ((s_at | d_at | static_cast<uintptr_t>(bytes)) % 16 == 0) {
    const auto* s = static_cast<const uint4*>(src);
    auto* d = static_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = s[i];
  } else {
    const auto* s = static_cast<const unsigned char*>(src);
    auto* d = static_cast<unsigned char*>(dst);
    for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) d[i] = s[i];
  }
}

__global__ void copy_byte_ranges_kernel(const ByteRange* ranges) {
  pdl_wait();
  const ByteRange r = ranges[blockIdx.x];
  block_copy_bytes(r.dst, r.src, r.bytes);
}

__global__ void write_cache_rows_kernel(WriteCacheRowsKernelParams p) {
  pdl_wait();
  const int64_t r = blockIdx.x;
  const int32_t seq = p.seq_of_row[r], entry = p.dst_rows[r];
  if (seq < 0 || entry < 0) return;
  const CacheRowTarget target = p.caches[seq];
  const int64_t row = pool_row(target.table, entry);
  if (row < 0) return;
  if (target.packed != PackedEntry::kNone) {
    const int64_t width = p.row_bytes / (p.src_bf16 ? 2 : 4);
    pack_entry_in_block(target.packed, FloatPtr{p.src, p.src_bf16}, r * width, static_cast<uint8_t*>(target.pool),
                        static_cast<int>(target.table.page_rows), row);
    return;
  }
  block_copy_bytes(static_cast<unsigned char*>(target.pool) + row * p.row_bytes,
                   static_cast<const unsigned char*>(p.src) + r * p.row_bytes, p.row_bytes);
}

void write_cache_rows(const WriteCacheRowsKernelParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.rows > 2147483647) throw UsageError("write_cache_rows: " + std::to_string(p.rows) + " rows in one launch");
  static_assert(kThreads == kPackEntryThreads, "write_cache_rows: a block packs a row");
  launch_pdl(write_cache_rows_kernel, static_cast<unsigned>(p.rows), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void copy_byte_ranges(const ByteRange* ranges, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (count > 2147483647) throw UsageError("copy_byte_ranges: " + std::to_string(count) + " ranges in one launch");
  launch_pdl(copy_byte_ranges_kernel, static_cast<unsigned>(count), kThreads, 0, stream, ranges);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void convert_copy(const ConvertCopyParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  launch_pdl(convert_copy_kernel, grid_for(p.n), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void embed_gather(const EmbedGatherParams& p, cudaStream_t stream) {
  if (p.tokens * p.streams == 0 || p.dim == 0) return;
  launch_pdl(embed_gather_kernel, static_cast<unsigned>(p.tokens * p.streams), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void broadcast_add(const BroadcastAddParams& p, cudaStream_t stream) {
  const int64_t n = p.tokens * p.streams * p.dim;
  if (n == 0) return;
  launch_pdl(broadcast_add_kernel, grid_for(n), kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

namespace {

// launch(std::integral_constant<int, V>{}) for the runtime v clamped to 1..8: the norm kernels'
// per-thread value (or virtual warp) counts as template arguments.
template <typename Launch>
void with_count_1_to_8(int64_t v, Launch&& launch) {
  switch (v) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 3: launch(std::integral_constant<int, 3>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 5: launch(std::integral_constant<int, 5>{}); break;
    case 6: launch(std::integral_constant<int, 6>{}); break;
    case 7: launch(std::integral_constant<int, 7>{}); break;
    default: launch(std::integral_constant<int, 8>{}); break;
  }
}

}  // namespace

void rms_norm_rows(const RmsNormRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.dim == 0) return;
  // About four elements per thread: a decode step's single rows of 4096 are latency-bound, so
  // they take whole 1024-thread blocks. The block size fixes the summation order, and it depends
  // on dim alone, so a row's result never depends on how many rows the batch has.
  const int64_t threads = rms_norm_block_threads(p.dim);
  const int64_t values = (p.dim + threads - 1) / threads;
  if (p.rows >= kNormWarpMinRows && threads <= 32 * 8 && values <= kNormValuesPerThread) {
    const auto blocks = static_cast<unsigned>((p.rows + kNormWarpRowsPerBlock - 1) / kNormWarpRowsPerBlock);
    with_count_1_to_8(threads / 32, [&](auto warps) {
      launch_pdl(rms_norm_warp_kernel<warps>, blocks, 32 * kNormWarpRowsPerBlock, 0, stream, p);
    });
  } else if (p.rows <= kNormRegsMaxRows && values <= kNormRegsMaxValues) {
    with_count_1_to_8(values, [&](auto per_thread) {
      launch_pdl(rms_norm_regs_kernel<per_thread>, static_cast<unsigned>(p.rows), static_cast<unsigned>(threads), 0,
                 stream, p);
    });
  } else if (threads == kNormWideBlock && values <= kNormWideMaxValues) {
    with_count_1_to_8(values, [&](auto per_thread) {
      launch_pdl(rms_norm_wide_kernel<per_thread>, static_cast<unsigned>(p.rows), kNormWideThreads, 0, stream, p);
    });
  } else {
    launch_pdl(rms_norm_kernel, static_cast<unsigned>(p.rows), static_cast<unsigned>(threads), 0, stream, p);
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void rope_rows(const RopeRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.heads == 0 || p.rope_dim == 0) return;
  const size_t smem = static_cast<size_t>(p.rope_dim) * sizeof(float);
  const bool runs = rope_takes_runs(p);
  const int64_t units = runs ? p.rope_dim / 8 : p.rope_dim / 2;  // a head's
  const int64_t heads_per_block = p.rows <= kRopeSplitMaxRows ? std::max<int64_t>(1, kThreads / units) : p.heads;
  const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>((p.heads + heads_per_block - 1) / heads_per_block));
  if (runs) launch_pdl(rope_kernel<true>, grid, kThreads, smem, stream, p, heads_per_block);
  else launch_pdl(rope_kernel<false>, grid, kThreads, smem, stream, p, heads_per_block);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void quant_sim_rows(const QuantSimRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return;
  if (quant_sim_lanes_fit(p)) {
    const int64_t pieces = p.rows * (p.cols / kQuantSimLaneValues);
    if (p.x.bf16) launch_pdl(quant_sim_lanes_kernel<true>, grid_for(pieces), kThreads, 0, stream, p);
    else launch_pdl(quant_sim_lanes_kernel<false>, grid_for(pieces), kThreads, 0, stream, p);
  } else {
    const int64_t warps = p.rows * ((p.cols + p.block - 1) / p.block);
    launch_pdl(quant_sim_kernel, grid_for(warps * 32), kThreads, 0, stream, p);
  }
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void hadamard_rows(const HadamardRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.width == 128) {  // the indexer's rows: a warp each
    const auto blocks = static_cast<unsigned>((p.rows + kThreads / 32 - 1) / (kThreads / 32));
    launch_pdl(hadamard_warp_kernel<4>, blocks, kThreads, 0, stream, p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const size_t smem = static_cast<size_t>(p.width) * sizeof(float);
  launch_pdl(hadamard_kernel, static_cast<unsigned>(p.rows), kThreads, smem, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

bool norm_rope_quant_fits(const NormRopeQuantRowsParams& p) {
  const int64_t threads = rms_norm_block_threads(p.dim);
  return p.vectors > 0 && p.vectors < kNormWarpMinRows && p.dim % 32 == 0 && p.dim <= kNormRopeQuantMaxDim &&
         (p.dim + threads - 1) / threads <= kNormRegsMaxValues &&
         (p.quant_cols == 0 || p.quant_block <= 32 * kQuantSimValues);
}

void norm_rope_quant_rows(const NormRopeQuantRowsParams& p, cudaStream_t stream) {
  if (!norm_rope_quant_fits(p))
    throw UsageError("norm_rope_quant_rows: " + std::to_string(p.vectors) + " vectors of " + std::to_string(p.dim) +
                     " (quantisation blocks of " + std::to_string(p.quant_block) + ") are not the fused launch's");
  const int64_t threads = rms_norm_block_threads(p.dim);
  with_count_1_to_8((p.dim + threads - 1) / threads, [&](auto per_thread) {
    launch_pdl(norm_rope_quant_kernel<per_thread>, static_cast<unsigned>(p.vectors), static_cast<unsigned>(threads), 0,
               stream, p);
  });
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
