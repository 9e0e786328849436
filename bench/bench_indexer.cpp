// Times the lightning indexer (kernels::indexer_topk: scores, then the top-k) at V4-Flash geometry
// (64 heads x 128, top-512, ratio 4) for decode batches 1/16/64 at 8k and 64k context (batch 1
// also at 16k and 32k) and prefills of 2k and 8k tokens, with the exact CUDA-core score kernel
// (the old path, kept for exact math) and the tensor-core one (the default numerics), plus the
// tensor-core scores and the top-k alone (its CTAs a token by size, then on 1, 2, 4 and 8); prints
// microseconds per call beside the memory floor (the keys' bytes read once at 4.43 TB/s). Inputs
// are bf16 e2m1 values times pow2 scales, as QAT leaves them; each sequence's keys are read
// through a shuffled block table of 64-key pages, as the model's are.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/device.h"
#include "core/numeric.h"
#include "kernels/cuda_check.h"
#include "cuda_timing.h"
#include "kernels/indexer/indexer_topk.h"

namespace {

using dsv4::kernels::IndexerScoreKernel;

constexpr int64_t kHeads = 64, kDh = 128, kTopk = 512, kRatio = 4;
constexpr int64_t kPageRows = 64;  // keys per cache page, read through a shuffled block table
constexpr double kMemoryBandwidth = 4.43e12;  // bytes/s, the H200's HBM3e peak

struct Case {
  const char* name;
  int64_t batch;       // sequences
  int64_t tokens;      // tokens per sequence
  int64_t start_pos;   // position of each sequence's first token
};

// Random bf16 values on the e2m1 grid times 2^-2 or 2^-3 (as FP4 QAT with pow2 scales leaves them).
std::vector<uint16_t> fp4_values(size_t n, std::mt19937& rng) {
  static const float grid[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::uniform_int_distribution<int> code(0, 15), scale(2, 3);
  std::vector<uint16_t> out(n);
  for (uint16_t& v : out) {
    const int c = code(rng);
    v = dsv4::float_to_bf16(std::ldexp((c & 8 ? -1.0f : 1.0f) * grid[c & 7], -scale(rng)));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv4;
  if (!cuda::device_available()) {
    std::fprintf(stderr, "bench_indexer: no CUDA device\n");
    return 1;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  const int exact_iters = std::max(1, iters / 5);  // the exact kernel takes up to ~0.3 s a call
  const Case cases[] = {{"decode b=1 8k", 1, 1, 8191},        {"decode b=16 8k", 16, 1, 8191},
                        {"decode b=64 8k", 64, 1, 8191},      {"decode b=1 16k", 1, 1, 16383},
                        {"decode b=1 32k", 1, 1, 32767},      {"decode b=1 64k", 1, 1, 65535},
                        {"decode b=16 64k", 16, 1, 65535},    {"decode b=64 64k", 64, 1, 65535},
                        {"prefill 2048", 1, 2048, 0},         {"prefill 8192", 1, 8192, 0}};
  std::mt19937 rng(5);
  std::printf("%-16s %6s %6s %10s %12s %12s %11s %9s %9s %9s %9s %9s %9s\n", "case", "tokens", "keys", "floor us",
              "exact us", "tensor us", "scores us", "topk us", "1-CTA us", "2-CTA us", "4-CTA us", "8-CTA us",
              "speed-up");
  for (const Case& c : cases) {
    const int64_t T = c.batch * c.tokens, keys_per_seq = (c.start_pos + c.tokens) / kRatio;
    // Each sequence's keys in memory of their own (a shared pool would sit in L2 and hide the reads).
    const std::vector<uint16_t> pool = fp4_values(static_cast<size_t>((keys_per_seq + 64 * c.batch) * kDh), rng);
    std::vector<uint16_t*> keys;
    std::vector<int32_t*> tables;
    std::vector<kernels::IndexerSeqDesc> seqs;
    std::vector<int32_t> seq_of_token, positions;
    const int64_t pages = (keys_per_seq + kPageRows - 1) / kPageRows;
    for (int64_t s = 0; s < c.batch; ++s) {
      const std::vector<uint16_t> mine(pool.begin() + s * 64 * kDh, pool.begin() + (s * 64 + pages * kPageRows) * kDh);
      keys.push_back(bench::device_copy(mine));
      std::vector<int32_t> table(static_cast<size_t>(pages));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), rng);
      tables.push_back(bench::device_copy(table));
      seqs.push_back({s * c.tokens, {keys.back(), true}, {tables.back(), pages, kPageRows, pages}});
      seq_of_token.insert(seq_of_token.end(), static_cast<size_t>(c.tokens), static_cast<int32_t>(s));
      for (int64_t i = 0; i < c.tokens; ++i) positions.push_back(static_cast<int32_t>(c.start_pos + i));
    }
    uint16_t* q = bench::device_copy(fp4_values(static_cast<size_t>(T * kHeads * kDh), rng));
    std::vector<uint16_t> w_host(static_cast<size_t>(T * kHeads));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (uint16_t& v : w_host) v = float_to_bf16(normal(rng));
    uint16_t* w = bench::device_copy(w_host);
    kernels::IndexerSeqDesc* d_seqs = bench::device_copy(seqs);
    int32_t* d_seq_of_token = bench::device_copy(seq_of_token);
    int32_t* d_positions = bench::device_copy(positions);
    float* scores = nullptr;
    int32_t* topk = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(&scores, static_cast<size_t>(T * keys_per_seq) * sizeof(float)));
    DSV4_CUDA_CHECK(cudaMalloc(&topk, static_cast<size_t>(T * kTopk) * sizeof(int32_t)));

    kernels::IndexerTopkParams p;
    p.q = {q, true};
    p.weights = {w, true};
    p.seqs = d_seqs;
    p.seq_of_token = d_seq_of_token;
    p.positions = d_positions;
    p.scores = scores;
    p.topk = topk;
    p.weight_scale = 1.0f / std::sqrt(static_cast<float>(kHeads * kDh));
    p.tokens = T;
    p.heads = kHeads;
    p.dh = kDh;
    p.ratio = kRatio;
    p.score_stride = keys_per_seq;
    p.k = kTopk;

    p.score_kernel = IndexerScoreKernel::kExact;
    const double exact_us = bench::time_us([&] { kernels::indexer_topk(p, nullptr); }, exact_iters);
    p.score_kernel = IndexerScoreKernel::kTensorCoreBf16;
    const double tensor_us = bench::time_us([&] { kernels::indexer_topk(p, nullptr); }, iters);
    const double scores_us = bench::time_us([&] { kernels::indexer_scores(p, nullptr); }, iters);
    const double topk_us = bench::time_us([&] { kernels::indexer_select_topk(p, nullptr); }, iters);
    // The top-k on each cluster size the kernel has, for choosing kernels::indexer_topk_ctas_for's bounds.
    double topk_us_by_ctas[4] = {};
    for (int i = 0; i < 4; ++i) {
      p.topk_ctas = 1 << i;
      topk_us_by_ctas[i] = bench::time_us([&] { kernels::indexer_select_topk(p, nullptr); }, iters);
    }
    p.topk_ctas = 0;
    const double key_bytes = static_cast<double>(c.batch * keys_per_seq * kDh * 2);
    std::printf("%-16s %6ld %6ld %10.2f %12.1f %12.2f %11.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.0fx\n", c.name,
                static_cast<long>(T), static_cast<long>(keys_per_seq), key_bytes / kMemoryBandwidth * 1e6, exact_us,
                tensor_us, scores_us, topk_us, topk_us_by_ctas[0], topk_us_by_ctas[1], topk_us_by_ctas[2],
                topk_us_by_ctas[3], exact_us / tensor_us);

    for (uint16_t* k : keys) cudaFree(k);
    for (int32_t* t : tables) cudaFree(t);
    cudaFree(q);
    cudaFree(w);
    cudaFree(d_seqs);
    cudaFree(d_seq_of_token);
    cudaFree(d_positions);
    cudaFree(scores);
    cudaFree(topk);
  }
  return 0;
}
