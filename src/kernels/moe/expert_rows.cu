// Row gathers copy a row per block, in 16-byte words where the rows allow it (else 16-bit words:
// every activation dtype is a multiple of that); the combine runs one thread per (token, column),
// or per eight columns of bf16 expert rows (16-byte loads and stores), with the CPU's summation
// order. Blocks loop over rows (grid y for the combine) so that no thread divides 64-bit indices.
#include "kernels/moe/expert_rows.h"

#include <cstdint>

#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "kernels/float_ptr.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 256;
// Below this many output values the eight-wide combine's eight times fewer threads keep too few
// loads in flight: on the H200 a decode step's combines took 107 us (batch 1) and 174 (16) on one
// thread a value, 162 and 245 on eight; at batch 64 (262k values) 287 and 266.
constexpr int64_t kEightWideMinValues = int64_t{1} << 18;

template <typename Word>  // uint4 or uint16_t
__global__ void gather_rows_kernel(GatherRowsParams p) {
  pdl_wait();
  const int64_t words = p.row_bytes / static_cast<int64_t>(sizeof(Word));
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const Word* src = static_cast<const Word*>(p.src) + p.index[r] * words;
    Word* dst = static_cast<Word*>(p.dst) + r * words;
    for (int64_t w = threadIdx.x; w < words; w += kThreads) dst[w] = src[w];
  }
}

__global__ void combine_experts_kernel(CombineExpertsParams p) {
  pdl_wait();
  const int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (c >= p.dim) return;
  for (int64_t t = blockIdx.y; t < p.tokens; t += gridDim.y) {
    float acc = 0.0f;
    for (int64_t s = 0; s < p.k; ++s) {
      const int64_t row = p.row_of != nullptr ? p.row_of[t * p.k + s] : t * p.k + s;
      if (row >= 0) acc = __fadd_rn(acc, load_float(p.expert_out, row * p.dim + c));
    }
    const int64_t x = t * p.dim + c;
    store_float(p.out, x, p.shared.data != nullptr ? __fadd_rn(acc, load_float(p.shared, x)) : acc);
  }
}

// The same sums, eight columns a thread, the experts' bf16 rows, the shared expert's row and the
// output read and written 16 bytes at a time (dim a multiple of 8, the arrays 16-byte aligned).
__global__ void combine_experts_x8_kernel(CombineExpertsParams p) {
  pdl_wait();
  const int64_t c0 = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) * 8;
  if (c0 >= p.dim) return;
  const auto* rows = static_cast<const uint16_t*>(p.expert_out.data);
  for (int64_t t = blockIdx.y; t < p.tokens; t += gridDim.y) {
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t s = 0; s < p.k; ++s) {
      const int64_t row = p.row_of != nullptr ? p.row_of[t * p.k + s] : t * p.k + s;
      if (row < 0) continue;
      float v[8];
      load_float8(FloatPtr{rows, true}, row * p.dim + c0, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], v[i]);
    }
    const int64_t x = t * p.dim + c0;
    if (p.shared.data != nullptr) {
      float shared[8];
      load_float8(p.shared, x, shared);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], shared[i]);
    }
    store_float8(p.out, x, acc);
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// A block (or grid row) per row up to `limit`; the kernels loop over the rows past it.
unsigned row_blocks(int64_t rows, int64_t limit) { return static_cast<unsigned>(rows < limit ? rows : limit); }

}  // namespace

void gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.row_bytes <= 0) return;
  const bool wide = p.row_bytes % 16 == 0 && aligned16(p.src) && aligned16(p.dst);
  const unsigned blocks = row_blocks(p.rows, 65535);
  if (wide) launch_pdl(gather_rows_kernel<uint4>, blocks, kThreads, 0, stream, p);
  else launch_pdl(gather_rows_kernel<uint16_t>, blocks, kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

void combine_experts(const CombineExpertsParams& p, cudaStream_t stream) {
  if (p.tokens <= 0 || p.dim <= 0) return;
  if (p.tokens * p.dim >= kEightWideMinValues && p.expert_out.bf16 && p.dim % 8 == 0 && aligned16(p.expert_out.data) &&
      aligned16(p.shared.data) && aligned16(p.out.data)) {
    const dim3 grid(blocks_for(p.dim / 8), row_blocks(p.tokens, 65535));
    launch_pdl(combine_experts_x8_kernel, grid, kThreads, 0, stream, p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const dim3 grid(blocks_for(p.dim), row_blocks(p.tokens, 65535));
  launch_pdl(combine_experts_kernel, grid, kThreads, 0, stream, p);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
