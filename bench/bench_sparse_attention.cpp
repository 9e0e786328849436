// Times sparse attention (MODEL.md §3.6) at V4-Flash geometry (64 heads of 512, window 128,
// top-512 compressed entries for CSA, all 64 of an 8k context for HCA, none for SWA): the
// tensor-core kernel of the default numerics (kernels::sparse_attn_mma, its splits' merge
// included; where its plan takes WGMMA, also forced onto mma.sync) against the CPU-order kernel
// (kernels::sparse_attn_rows), for decode batches and an
// 8k prefill, beside the floors: the entries' bytes read once at 4.43 TB/s, and the FLOPs at the
// measured 792 TFLOP/s of bf16 tensor cores; and the tensor-core kernel over packed FP8 entries
// (kv/packed_entries.h, `--kv-cache-dtype fp8`, the batch's rows packed too). Kernel time only (the
// per-call table upload of CudaOps and its packing of the batch's rows are left out).
// Usage: bench_sparse_attention [iterations] [case name part, e.g. "csa prefill"]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "cuda_timing.h"
#include "kernels/attention/sparse_attn_mma.h"
#include "kernels/attention/sparse_attn_rows.h"
#include "kernels/sm_count.h"
#include "kv/fp8_cache_layout.h"

namespace {

constexpr int64_t kHeads = 64, kD = 512, kWindow = 128, kTopk = 512;
constexpr int64_t kPageRows = 64;  // compressed entries per cache page, read through a shuffled block table
constexpr double kMemoryBandwidth = 4.43e12;  // bytes/s (ENV.md, read-only streaming)
constexpr double kBf16Flops = 792e12;         // bf16 GEMM, cuBLASLt 8192^3 (ENV.md)

struct Case {
  const char* name;
  int64_t ratio;      // 4: CSA (top-k), 128: HCA (all compressed), 0: SWA
  int64_t batch;      // sequences
  int64_t tokens;     // tokens per sequence
  int64_t start_pos;  // of each sequence's first token
};

// Packed entries of random codes (e4m3 codes and e8m0 scales below 0x7f: finite values); the
// timing does not depend on the values.
std::vector<uint8_t> random_entry_bytes(int64_t entries, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 0x7e);
  std::vector<uint8_t> out(static_cast<size_t>(entries * dsv4::Fp8CacheLayout::kEntryBytes));
  for (uint8_t& v : out) v = static_cast<uint8_t>(byte(rng));
  return out;
}

std::vector<uint16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> out(n);
  for (uint16_t& v : out) v = dsv4::float_to_bf16(dist(rng));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::string only = argc > 2 ? argv[2] : "";
  if (!cuda::device_available()) {
    std::printf("bench_sparse_attention: no CUDA device\n");
    return 0;
  }
  const Case cases[] = {{"csa decode b=1 8k", 4, 1, 1, 8192},   {"csa decode b=16 8k", 4, 16, 1, 8192},
                        {"csa decode b=64 8k", 4, 64, 1, 8192}, {"hca decode b=1 8k", 128, 1, 1, 8192},
                        {"hca decode b=64 8k", 128, 64, 1, 8192}, {"swa decode b=1 8k", 0, 1, 1, 8192},
                        {"csa prefill 8192", 4, 1, 8192, 0},     {"hca prefill 8192", 128, 1, 8192, 0}};
  std::mt19937 rng(7);
  std::printf("%-22s %8s %12s %12s %12s %12s %10s %10s\n", "case", "tokens", "tensor us", "mma.sync us", "cpu-order us",
              "fp8 pages us", "bytes us", "flops us");
  for (const Case& c : cases) {
    if (std::string(c.name).find(only) == std::string::npos) continue;
    const int64_t T = c.batch * c.tokens, capacity = c.ratio > 0 ? (c.start_pos + c.tokens) / c.ratio + 1 : 1;
    uint16_t* q = bench::device_copy(random_bf16(static_cast<size_t>(T * kHeads * kD), 2.0f, rng));
    uint16_t* kv = bench::device_copy(random_bf16(static_cast<size_t>(T * kD), 1.0f, rng));
    uint16_t* window = bench::device_copy(random_bf16(static_cast<size_t>(kWindow * kD), 1.0f, rng));
    const int64_t pages = (capacity + kPageRows - 1) / kPageRows;
    uint16_t* compressed = bench::device_copy(random_bf16(static_cast<size_t>(pages * kPageRows * kD), 1.0f, rng));
    std::vector<int32_t> table(static_cast<size_t>(pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    int32_t* pages_of_compressed = bench::device_copy(table);
    float* sink = bench::device_copy(std::vector<float>(kHeads, 0.5f));
    uint16_t* out = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(&out, static_cast<size_t>(T * kHeads * kD) * sizeof(uint16_t)));
    // Every sequence reads the same window ring and compressed entries, the latter through one
    // shuffled block table (the bytes a kernel moves do not depend on which sequence owns them).
    std::vector<kernels::SparseAttnSeq> seqs;
    std::vector<int32_t> seq_of_token, positions, topk;
    int64_t max_entries = 0;
    double entries_read = 0, flops = 0;
    for (int64_t s = 0; s < c.batch; ++s) {
      kernels::SparseAttnSeq desc;
      desc.token_begin = s * c.tokens;
      desc.window = {window, true};
      if (c.ratio > 0) {
        desc.compressed = {compressed, true};
        desc.compressed_pages = {pages_of_compressed, pages, kPageRows, pages};
      }
      seqs.push_back(desc);
      for (int64_t i = 0; i < c.tokens; ++i) {
        seq_of_token.push_back(static_cast<int32_t>(s));
        positions.push_back(static_cast<int32_t>(c.start_pos + i));
        const int64_t pos = c.start_pos + i, visible = c.ratio > 0 ? (pos + 1) / c.ratio : 0;
        int64_t entries = std::min(kWindow, pos + 1);
        if (c.ratio == 4) {
          std::vector<int32_t> ids(static_cast<size_t>(visible));
          std::iota(ids.begin(), ids.end(), 0);
          std::shuffle(ids.begin(), ids.end(), rng);
          ids.resize(std::min<size_t>(ids.size(), kTopk));
          std::sort(ids.begin(), ids.end());
          ids.resize(kTopk, -1);
          topk.insert(topk.end(), ids.begin(), ids.end());
          entries += std::min(visible, kTopk);
          max_entries = std::max(max_entries, std::min(kWindow, pos + 1) + kTopk);
        } else {
          entries += visible;
          max_entries = std::max(max_entries, entries);
        }
        entries_read += static_cast<double>(entries);
        flops += 4.0 * kHeads * kD * static_cast<double>(entries);
      }
    }
    const auto* seq_table = bench::device_copy(seqs);
    const int32_t* token_seq = bench::device_copy(seq_of_token);
    const int32_t* token_positions = bench::device_copy(positions);
    const int32_t* topk_ids = c.ratio == 4 ? bench::device_copy(topk) : nullptr;

    kernels::SparseAttnRowsParams p;
    p.q = {q, true};
    p.kv = {kv, true};
    p.seqs = seq_table;
    p.seq_of_token = token_seq;
    p.positions = token_positions;
    p.topk = topk_ids;
    p.sink = {sink, false};
    p.out = {out, true};
    p.tokens = T;
    p.heads = kHeads;
    p.d = kD;
    p.window_size = kWindow;
    p.ratio = c.ratio;
    p.k = c.ratio == 4 ? kTopk : 0;
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kD));
    kernels::SparseAttnMmaPlan plan =
        kernels::sparse_attn_mma_plan(T, kHeads, max_entries, kernels::current_device_sm_count());
    void* workspace = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(&workspace, std::max<size_t>(plan.workspace_bytes, 1)));
    const double tensor_us = bench::time_us([&] { kernels::sparse_attn_mma(p, plan, workspace, nullptr); }, iters);
    const bool took_wgmma = kernels::sparse_attn_mma_takes_wgmma(plan);
    plan.wgmma = false;
    const double mma_sync_us =
        took_wgmma ? bench::time_us([&] { kernels::sparse_attn_mma(p, plan, workspace, nullptr); }, iters) : tensor_us;
    // The CPU-order kernel is three passes in fp32 on CUDA cores: a few runs suffice at prefill.
    const double rows_us = bench::time_us([&] { kernels::sparse_attn_rows(p, nullptr); }, c.tokens > 1 ? 2 : iters);
    // The same launch over packed entries.
    plan.wgmma = took_wgmma;
    const int64_t kv_page_rows = T + T % 2;
    uint8_t* kv_packed = bench::device_copy(random_entry_bytes(kv_page_rows, rng));
    uint8_t* window_packed = bench::device_copy(random_entry_bytes(kWindow, rng));
    uint8_t* compressed_packed = bench::device_copy(random_entry_bytes(pages * kPageRows, rng));
    std::vector<kernels::SparseAttnSeq> packed_seqs = seqs;
    for (kernels::SparseAttnSeq& desc : packed_seqs) {
      desc.window = {window_packed, false};
      desc.window_rows = kWindow;
      if (c.ratio > 0) desc.compressed = {compressed_packed, false};
    }
    const auto* packed_seq_table = bench::device_copy(packed_seqs);
    kernels::SparseAttnRowsParams packed_p = p;
    packed_p.packed = true;
    packed_p.kv = {kv_packed, false};
    packed_p.kv_page_rows = kv_page_rows;
    packed_p.seqs = packed_seq_table;
    const double packed_us =
        bench::time_us([&] { kernels::sparse_attn_mma(packed_p, plan, workspace, nullptr); }, iters);
    // Decode: every sequence's entries; prefill: the sequence's distinct entries, read once.
    const double bytes = (c.tokens > 1 ? static_cast<double>(std::min(kWindow, c.tokens) + capacity)
                                       : entries_read) * kD * 2.0;
    std::printf("%-22s %8lld %12.2f %12.2f %12.2f %12.2f %10.2f %10.2f\n", c.name, static_cast<long long>(T),
                tensor_us, mma_sync_us, rows_us, packed_us, 1e6 * bytes / kMemoryBandwidth, 1e6 * flops / kBf16Flops);
    for (void* ptr : {static_cast<void*>(q), static_cast<void*>(kv), static_cast<void*>(window),
                      static_cast<void*>(kv_packed), static_cast<void*>(window_packed),
                      static_cast<void*>(compressed_packed), const_cast<void*>(static_cast<const void*>(packed_seq_table)),
                      static_cast<void*>(compressed), static_cast<void*>(pages_of_compressed),
                      static_cast<void*>(sink), static_cast<void*>(out), workspace,
                      const_cast<void*>(static_cast<const void*>(seq_table)),
                      const_cast<void*>(static_cast<const void*>(token_seq)),
                      const_cast<void*>(static_cast<const void*>(token_positions)),
                      const_cast<void*>(static_cast<const void*>(topk_ids))})
      cudaFree(ptr);
  }
  return 0;
}
