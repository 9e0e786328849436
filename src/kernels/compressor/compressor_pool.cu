// One thread per (completed block, channel): the block's rows visited in CpuOps' order (with
// overlap, the previous block's first half then this block's second half), max, sum of exp and
// weighted sum in fp32 with the same operation order and no contraction, so only expf's last
// bit can differ from the CPU. A second kernel writes the slice's last ring rows.
#include "kernels/compressor/compressor_pool.h"

#include "backend/cuda/cuda_check.h"

namespace dsv4::kernels {
namespace {

constexpr int kThreads = 128;

struct Geometry {
  int64_t m, coff, dc, ring;
};

__host__ __device__ Geometry geometry(const CompressorPoolParams& p) {
  const int64_t coff = p.ratio == 4 ? 2 : 1;
  return {p.ratio, coff, p.width / coff, coff * p.ratio};
}

// (kv, score + ape) of position q at column col: from the batch when the slice holds q, else
// from the ring.
struct RowValue {
  float kv, score;
};

__device__ RowValue row_value(const CompressorPoolParams& p, const Geometry& g, int64_t q, int64_t col) {
  if (q >= p.start_pos) {
    const int64_t i = (q - p.start_pos) * p.width + col;
    return {p.kv[i], __fadd_rn(p.score[i], load_float(p.ape, (q % g.m) * p.width + col))};
  }
  const int64_t i = (q % g.ring) * p.width + col;
  return {p.state_kv[i], p.state_score[i]};
}

__global__ void pool_kernel(CompressorPoolParams p, int64_t first_block) {
  const Geometry g = geometry(p);
  const int64_t c = blockIdx.y * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (c >= g.dc) return;
  const int64_t j = first_block + blockIdx.x;
  const bool overlap = g.coff == 2;
  // Row r of the pooled set: position and column.
  const int64_t rows = overlap && j >= 1 ? 2 * g.m : g.m;
  const int64_t prev_rows = rows - g.m;
  auto at = [&](int64_t r) {
    return r < prev_rows ? row_value(p, g, (j - 1) * g.m + r, c)
                         : row_value(p, g, j * g.m + (r - prev_rows), c + (overlap ? g.dc : 0));
  };
  float mx = -INFINITY;
  for (int64_t r = 0; r < rows; ++r) mx = fmaxf(mx, at(r).score);
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum = __fadd_rn(sum, expf(__fsub_rn(at(r).score, mx)));
  float acc = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const RowValue v = at(r);
    acc = __fadd_rn(acc, __fmul_rn(v.kv, __fdiv_rn(expf(__fsub_rn(v.score, mx)), sum)));
  }
  p.out[blockIdx.x * g.dc + c] = acc;
}

// Ring rows of the positions [first, start_pos + num_tokens), one CTA row per position.
__global__ void ring_kernel(CompressorPoolParams p, int64_t first) {
  const Geometry g = geometry(p);
  const int64_t col = blockIdx.y * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (col >= p.width) return;
  const int64_t q = first + blockIdx.x;
  const RowValue v = row_value(p, g, q, col);
  const int64_t i = (q % g.ring) * p.width + col;
  p.state_kv[i] = v.kv;
  p.state_score[i] = v.score;
}

}  // namespace

void compressor_pool(const CompressorPoolParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  const Geometry g = geometry(p);
  const int64_t end = p.start_pos + p.num_tokens;
  const int64_t first_block = p.start_pos / g.m, blocks = end / g.m - first_block;
  if (blocks > 0) {
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((g.dc + kThreads - 1) / kThreads));
    pool_kernel<<<grid, kThreads, 0, stream>>>(p, first_block);
    DSV4_CUDA_CHECK(cudaGetLastError());
  }
  const int64_t first = end - g.ring > p.start_pos ? end - g.ring : p.start_pos;
  const dim3 grid(static_cast<unsigned>(end - first), static_cast<unsigned>((p.width + kThreads - 1) / kThreads));
  ring_kernel<<<grid, kThreads, 0, stream>>>(p, first);
  DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::kernels
