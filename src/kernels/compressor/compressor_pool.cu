// One thread per (block row, channel) of every slice of the batch: the block's rows visited
// in CpuOps' order (with overlap, the previous block's first half then this block's second half),
// max, sum of exp and weighted sum in fp32 with the same operation order and no contraction, so
// only expf's last bit can differ from the CPU. A second kernel writes the slices' last ring rows.
#include "kernels/compressor/compressor_pool.h"

#include "kernels/cuda_check.h"
#include "kernels/launch.cuh"

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

__device__ RowValue row_value(const CompressorPoolParams& p, const Geometry& g, int64_t start_pos, int64_t q,
                              int64_t col) {
  if (q >= start_pos) {
    const int64_t i = (q - start_pos) * p.width + col;
    return {p.kv[i], __fadd_rn(p.score[i], load_float(p.ape, (q % g.m) * p.width + col))};
  }
  const int64_t i = (q % g.ring) * p.width + col;
  return {p.state_kv[i], p.state_score[i]};
}

__global__ void pool_kernel(CompressorPoolBatch b) {
  pdl_wait();
  const CompressorPoolItem item = b.pool_items[blockIdx.x];
  const CompressorPoolParams p = b.seqs[item.seq];
  const Geometry g = geometry(p);
  const int64_t c = blockIdx.y * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (c >= g.dc) return;
  const int64_t start_pos = *p.start_pos;
  const int64_t j = start_pos / g.m + item.index;
  if ((j + 1) * g.m > start_pos + p.num_tokens) {  // a block the slice does not complete
    p.out[item.index * g.dc + c] = 0.0f;
    return;
  }
  const bool overlap = g.coff == 2;
  // Row r of the pooled set: position and column.
  const int64_t rows = overlap && j >= 1 ? 2 * g.m : g.m;
  const int64_t prev_rows = rows - g.m;
  auto at = [&](int64_t r) {
    return r < prev_rows ? row_value(p, g, start_pos, (j - 1) * g.m + r, c)
                         : row_value(p, g, start_pos, j * g.m + (r - prev_rows), c + (overlap ? g.dc : 0));
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
  p.out[item.index * g.dc + c] = acc;
}

// The ring rows a slice writes: its last `ring` positions, at most all of it.
__host__ __device__ int64_t ring_rows_written(const CompressorPoolParams& p, const Geometry& g) {
  return p.num_tokens < g.ring ? p.num_tokens : g.ring;
}

// Ring rows of the slice's last ring_rows_written positions, one CTA row per position.
__global__ void ring_kernel(CompressorPoolBatch b) {
  pdl_wait();
  const CompressorPoolItem item = b.ring_items[blockIdx.x];
  const CompressorPoolParams p = b.seqs[item.seq];
  const Geometry g = geometry(p);
  const int64_t col = blockIdx.y * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (col >= p.width) return;
  const int64_t start_pos = *p.start_pos;
  const int64_t q = start_pos + p.num_tokens - ring_rows_written(p, g) + item.index;
  const RowValue v = row_value(p, g, start_pos, q, col);
  const int64_t i = (q % g.ring) * p.width + col;
  p.state_kv[i] = v.kv;
  p.state_score[i] = v.score;
}

}  // namespace

void add_compressor_slice(CompressorPoolPlan& plan, const CompressorPoolParams& p) {
  if (p.num_tokens <= 0) return;
  const Geometry g = geometry(p);
  const auto seq = static_cast<int32_t>(plan.seqs.size());
  plan.seqs.push_back(p);
  for (int64_t j = 0; j < (p.num_tokens + g.m - 1) / g.m; ++j)  // ceil(n / m) block rows
    plan.pool_items.push_back({seq, static_cast<int32_t>(j)});
  for (int64_t r = 0; r < ring_rows_written(p, g); ++r) plan.ring_items.push_back({seq, static_cast<int32_t>(r)});
}

void compressor_pool(const CompressorPoolBatch& b, cudaStream_t stream) {
  const int64_t coff = b.ratio == 4 ? 2 : 1, dc = b.width / coff;
  if (b.pool_count > 0) {
    const dim3 grid(static_cast<unsigned>(b.pool_count), static_cast<unsigned>((dc + kThreads - 1) / kThreads));
    launch_pdl(pool_kernel, grid, kThreads, 0, stream, b);
    DSV4_CUDA_CHECK(cudaGetLastError());
  }
  if (b.ring_count > 0) {
    const dim3 grid(static_cast<unsigned>(b.ring_count), static_cast<unsigned>((b.width + kThreads - 1) / kThreads));
    launch_pdl(ring_kernel, grid, kThreads, 0, stream, b);
    DSV4_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace dsv4::kernels
