// The lightning indexer on the GPU against the CPU reference: CudaOps::indexer_topk against
// CpuOps::indexer_topk, and the device scores of the kernel CudaOps picks against
// cpu::indexer_score_row (the CPU's own code), at V4-Flash geometry (64 heads x 128, top-512,
// ratio 4: decode batches 1/16/64 at 8k context, a 1024-token prefill, mixed batches) and toy
// sizes, with q and keys made as the model makes them (Hadamard, then FP4 QAT in blocks of 32,
// stored bf16) and the keys in shuffled pages of a pool; then the top-k kernel alone on crafted
// score rows (ties, infinities, signed zeros, rows longer than 65535). The tensor-core cases run
// again on the keys packed as MXFP4 keys, for the bf16 keys' bits. Measured mismatch counts are
// printed ("[measured] ...").
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/indexer_scores.h"
#include "backend/cuda/cuda_ops.h"
#include "core/numeric.h"
#include "kernels/indexer/indexer_topk.h"
#include "kv/packed_entries.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using kernels::IndexerScoreKernel;
using testing::DeviceBuffer;

constexpr int64_t kFlashHeads = 64, kFlashDh = 128, kFlashTopk = 512, kRatio = 4;
constexpr int64_t kPoisonRows = 3;  // NaN key rows past the last visible entry: must never be read
// Keys live in pages of this many rows (not a multiple of the score kernels' 64-key tiles, so a
// tile spans pages), in a shuffled order with spare NaN pages between them.
constexpr int64_t kKeyPageRows = 48;

// The top k of a score row as CpuOps picks them (higher first, equal scores: lower id first),
// ascending, then -1.
std::vector<int32_t> host_topk(const float* score, int64_t visible, int64_t k) {
  std::vector<int32_t> ids(static_cast<size_t>(visible));
  std::iota(ids.begin(), ids.end(), 0);
  if (visible > k) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    ids.resize(static_cast<size_t>(k));
    std::sort(ids.begin(), ids.end());
  }
  ids.resize(static_cast<size_t>(k), -1);
  return ids;
}

std::string describe_score(float v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g (0x%08x)", static_cast<double>(v), float_bits(v));
  return buf;
}

// The ids of one list missing from the other (both ascending, -1 padded), at most `limit`.
std::vector<int32_t> missing_from(const std::vector<int32_t>& a, const std::vector<int32_t>& b, size_t limit) {
  std::vector<int32_t> out;
  for (int32_t id : a)
    if (id >= 0 && !std::binary_search(b.begin(), b.end(), id) && out.size() < limit) out.push_back(id);
  return out;
}

// How q and the keys are made.
enum class Inputs {
  kFp4Qat,  // as the model makes them in the default numerics: Hadamard, then e2m1 QAT per 32
  kPlain,   // plain N(0, 1) values (not the model's: the tensor-core sums may round)
};

struct IndexerCase {
  std::string name;
  int64_t heads, dh, k;
  DType dtype;  // of q, weights and keys
  Inputs inputs;
  std::vector<SeqSlice> slices;  // token_begin is filled in
  int64_t tie_period = 0;        // > 0: key row j repeats row j % tie_period, every 11th row zero
};

// Per row of `rows`, the exponent of each 32-block's largest magnitude (INT_MIN for a zero block).
std::vector<int> block_exponents(const std::vector<float>& v, int64_t width) {
  const int64_t blocks = width / 32;
  std::vector<int> out(v.size() / 32);
  for (size_t r = 0; r * width < v.size(); ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      float amax = 0;
      for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[r * width + b * 32 + i]));
      out[r * blocks + b] = amax > 0 ? std::ilogb(amax) : INT_MIN;
    }
  return out;
}

class IndexerCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DSV4_SKIP_WITHOUT_GPU();
    gpu_ = std::make_unique<cuda::CudaOps>();
  }

  // A host tensor of N(0, 1) values stored as dtype; with kFp4Qat each row of `width` goes
  // through CpuOps' hadamard and e2m1 quant_sim, as model/indexer.cpp and compressor.cpp do.
  Tensor make_rows(DType dtype, Shape shape, int64_t width, Inputs inputs) {
    Tensor t(dtype, std::move(shape));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float v = dist(rng_);
      if (dtype == DType::kF32) t.data<float>()[i] = v;
      else t.data<uint16_t>()[i] = float_to_bf16(v);
    }
    if (inputs == Inputs::kFp4Qat) {
      const TensorView rows(reinterpret_cast<std::byte*>(t.data<uint8_t>()), dtype, {t.numel() / width, width});
      cpu_.hadamard({rows});
      cpu_.quant_sim({rows, width, 32, QuantFormat::kE2M1});
    }
    return t;
  }

  static std::vector<float> host_floats(const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = t.dtype() == DType::kF32 ? t.data<float>()[i] : bf16_to_float(t.data<uint16_t>()[i]);
    return out;
  }

  struct Both {
    DeviceTensor cpu, gpu;
  };
  Both both(const Tensor& host) {
    Both b{cpu_.alloc(host.dtype(), host.shape()), gpu_->alloc(host.dtype(), host.shape())};
    cpu_.upload(host.view(), b.cpu.view());
    gpu_->upload(host.view(), b.gpu.view());
    return b;
  }

  std::vector<int32_t> ints(Ops& ops, const DeviceTensor& t) {
    Tensor host(DType::kI32, t.shape());
    ops.download(t.view(), host.view());
    return {host.data<int32_t>(), host.data<int32_t>() + host.numel()};
  }

  // A sequence's keys ([rows, dh]) as the model keeps them, in both backends: pages of
  // kKeyPageRows rows of a pool in a shuffled order, every other pool row NaN; with `packed`, as
  // packed MXFP4 keys (kv/packed_entries.h, `--kv-cache-dtype fp8`), the other rows 0xFF bytes.
  struct PagedKeys {
    Both pool, table;
    PagedCache cpu() const { return {pool.cpu.view(), table.cpu.view()}; }
    PagedCache gpu() const { return {pool.gpu.view(), table.gpu.view()}; }
  };
  PagedKeys paged_keys(const Tensor& keys, bool packed = false) {
    const int64_t rows = keys.shape()[0], dh = keys.shape()[1], pages = (rows + kKeyPageRows - 1) / kKeyPageRows;
    const int64_t num_pages = pages + 2;
    std::vector<int32_t> ids(static_cast<size_t>(num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(static_cast<size_t>(pages));
    const auto pool_row = [&](int64_t j) { return ids[static_cast<size_t>(j / kKeyPageRows)] * kKeyPageRows + j % kKeyPageRows; };
    Tensor pool(packed ? DType::kU8 : keys.dtype(), {num_pages, kKeyPageRows, packed ? Mxfp4KeyLayout::kEntryBytes : dh});
    if (packed) {
      std::fill_n(pool.data<uint8_t>(), pool.numel(), uint8_t{0xFF});
      const std::vector<float> values = host_floats(keys);
      for (int64_t j = 0; j < rows; ++j)
        encode_mxfp4_key(values.data() + j * dh, Mxfp4KeyLayout{static_cast<int>(kKeyPageRows)}, pool_row(j),
                         pool.data<uint8_t>());
    } else {
      for (int64_t i = 0; i < pool.numel(); ++i) {
        if (keys.dtype() == DType::kBF16) pool.data<uint16_t>()[i] = 0x7fc0;
        else pool.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
      }
      const size_t row_bytes = static_cast<size_t>(dh) * dtype_size(keys.dtype());
      for (int64_t j = 0; j < rows; ++j)
        std::memcpy(pool.data<std::byte>() + pool_row(j) * row_bytes, keys.data<std::byte>() + j * row_bytes, row_bytes);
    }
    Tensor table(DType::kI32, {pages});
    std::copy(ids.begin(), ids.end(), table.data<int32_t>());
    return {both(pool), both(table)};
  }

  void run_case(const IndexerCase& c);

  cpu::CpuOps cpu_{0};
  std::unique_ptr<cuda::CudaOps> gpu_;
  std::mt19937 rng_{20250611};
};

void IndexerCudaTest::run_case(const IndexerCase& c) {
  std::vector<SeqSlice> slices = c.slices;
  int64_t T = 0;
  for (SeqSlice& s : slices) {
    s.token_begin = T;
    T += s.num_tokens;
  }
  const int64_t heads = c.heads, dh = c.dh, k = c.k;
  const bool bf16 = c.dtype == DType::kBF16;
  const IndexerScoreKernel kernel = kernels::indexer_score_kernel_for(bf16, bf16, heads, dh);
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(dh * heads));

  const Tensor q_host = make_rows(c.dtype, {T, heads, dh}, dh, c.inputs);
  const Tensor w_host = make_rows(c.dtype, {T, heads}, heads, Inputs::kPlain);
  std::vector<Tensor> key_hosts;
  for (const SeqSlice& sl : slices) {
    const int64_t filled = (sl.start_pos + sl.num_tokens) / kRatio;
    Tensor keys = make_rows(c.dtype, {filled + kPoisonRows, dh}, dh, c.inputs);
    const size_t row_bytes = static_cast<size_t>(dh) * dtype_size(c.dtype);
    auto* bytes = reinterpret_cast<std::byte*>(keys.data<uint8_t>());
    if (c.tie_period > 0) {
      for (int64_t j = c.tie_period; j < filled; ++j)
        std::memcpy(bytes + j * row_bytes, bytes + (j % c.tie_period) * row_bytes, row_bytes);
      for (int64_t j = 0; j < filled; j += 11) std::memset(bytes + j * row_bytes, 0, row_bytes);
    }
    for (int64_t j = filled; j < filled + kPoisonRows; ++j)
      for (int64_t i = 0; i < dh; ++i) {
        if (bf16) keys.data<uint16_t>()[j * dh + i] = 0x7fc0;
        else keys.data<float>()[j * dh + i] = std::numeric_limits<float>::quiet_NaN();
      }
    key_hosts.push_back(std::move(keys));
  }

  // The op on both backends.
  const Both q = both(q_host), w = both(w_host);
  std::vector<PagedKeys> keys;
  for (const Tensor& kh : key_hosts) keys.push_back(paged_keys(kh));
  std::vector<IndexerSeq> cseqs, gseqs;
  for (size_t s = 0; s < slices.size(); ++s) {
    cseqs.push_back({slices[s], keys[s].cpu()});
    gseqs.push_back({slices[s], keys[s].gpu()});
  }
  const DeviceTensor topk_cpu = cpu_.alloc(DType::kI32, {T, k}), topk_gpu = gpu_->alloc(DType::kI32, {T, k});
  DSV4_CUDA_CHECK(cudaMemsetAsync(topk_gpu.view().bytes(), 0xa5, topk_gpu.view().nbytes(), gpu_->stream()));
  std::vector<int32_t> token_positions(static_cast<size_t>(T), 0);
  for (const SeqSlice& sl : slices)
    for (int64_t i = 0; i < sl.num_tokens; ++i)
      token_positions[static_cast<size_t>(sl.token_begin + i)] = static_cast<int32_t>(sl.start_pos + i);
  Tensor positions_host(DType::kI32, {T});
  std::copy(token_positions.begin(), token_positions.end(), positions_host.data<int32_t>());
  const Both positions = both(positions_host);
  cpu_.indexer_topk({q.cpu.view(), w.cpu.view(), weight_scale, kRatio, positions.cpu.view(), cseqs, topk_cpu.view()});
  gpu_->indexer_topk({q.gpu.view(), w.gpu.view(), weight_scale, kRatio, positions.gpu.view(), gseqs, topk_gpu.view()});
  const std::vector<int32_t> want = ints(cpu_, topk_cpu), got = ints(*gpu_, topk_gpu);

  // The scores of the same kernel, launched directly, against the CPU's code on the same values.
  std::vector<int64_t> visible(static_cast<size_t>(T)), position(static_cast<size_t>(T));
  std::vector<kernels::IndexerSeqDesc> descs;
  std::vector<int32_t> seq_of_token(static_cast<size_t>(T));
  std::vector<size_t> key_index_of_token(static_cast<size_t>(T));
  int64_t stride = 0;
  for (size_t s = 0; s < slices.size(); ++s) {
    const SeqSlice& sl = slices[s];
    if (sl.num_tokens == 0) continue;
    for (int64_t i = 0; i < sl.num_tokens; ++i) {
      const auto t = static_cast<size_t>(sl.token_begin + i);
      position[t] = sl.start_pos + i;
      visible[t] = (position[t] + 1) / kRatio;
      seq_of_token[t] = static_cast<int32_t>(descs.size());
      key_index_of_token[t] = s;
      stride = std::max(stride, visible[t]);
    }
    descs.push_back({sl.token_begin, {keys[s].pool.gpu.view().bytes(), bf16}, page_table(keys[s].gpu())});
  }
  DeviceBuffer<kernels::IndexerSeqDesc> d_descs(descs.size());
  DeviceBuffer<int32_t> d_seq_of_token(seq_of_token.size());
  DeviceBuffer<float> d_scores(static_cast<size_t>(T * stride));
  DeviceBuffer<int32_t> d_topk(static_cast<size_t>(T * k));
  d_descs.upload(descs);
  d_seq_of_token.upload(seq_of_token);
  d_scores.poison();
  kernels::IndexerTopkParams kp;
  kp.q = {q.gpu.view().bytes(), bf16};
  kp.weights = {w.gpu.view().bytes(), bf16};
  kp.seqs = d_descs.get();
  kp.seq_of_token = d_seq_of_token.get();
  kp.positions = positions.gpu.view().data<int32_t>();
  kp.scores = d_scores.get();
  kp.topk = d_topk.get();
  kp.weight_scale = weight_scale;
  kp.tokens = T;
  kp.heads = heads;
  kp.dh = dh;
  kp.ratio = kRatio;
  kp.score_stride = stride;
  kp.k = k;
  kp.score_kernel = kernel;
  gpu_->synchronize();
  kernels::indexer_scores(kp, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> gpu_scores = d_scores.download();

  const std::vector<float> qf = host_floats(q_host), wf = host_floats(w_host);
  std::vector<std::vector<float>> kf;
  for (const Tensor& kh : key_hosts) kf.push_back(host_floats(kh));
  std::vector<float> cpu_scores(static_cast<size_t>(T * stride), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    cpu::indexer_score_row(qf.data() + t * heads * dh, wf.data() + t * heads, weight_scale,
                           kf[key_index_of_token[t]].data(), visible[t], heads, dh, cpu_scores.data() + t * stride);

  // Scores: how many differ, the first one, the largest difference relative to its row's largest
  // magnitude (scores near 0 come from cancelling heads, so their own magnitude is no scale).
  int64_t total = 0, differing = 0, rows_differing = 0;
  double max_rel = 0;
  std::string first_difference;
  std::vector<bool> row_scores_equal(static_cast<size_t>(T), true);
  for (int64_t t = 0; t < T; ++t) {
    double row_max = 1e-30;
    for (int64_t j = 0; j < visible[t]; ++j)
      if (std::isfinite(cpu_scores[t * stride + j]))
        row_max = std::max(row_max, std::fabs(static_cast<double>(cpu_scores[t * stride + j])));
    for (int64_t j = 0; j < visible[t]; ++j) {
      ++total;
      const float a = gpu_scores[t * stride + j], b = cpu_scores[t * stride + j];
      if (float_bits(a) == float_bits(b)) continue;
      ++differing;
      if (row_scores_equal[t]) ++rows_differing;
      row_scores_equal[t] = false;
      const double rel = std::fabs(static_cast<double>(a) - b) / row_max;
      max_rel = std::max(max_rel, std::isfinite(rel) ? rel : INFINITY);
      if (first_difference.empty())
        first_difference = "token " + std::to_string(t) + " (position " + std::to_string(position[t]) + ", " +
                           std::to_string(visible[t]) + " visible) entry " + std::to_string(j) + ": gpu " +
                           describe_score(a) + " cpu " + describe_score(b);
    }
  }

  // Top-k: the GPU op against the CPU op; each against the host selection of its own scores.
  int64_t rows_identical = 0, ids_only_gpu = 0, select_mismatches = 0, cpu_select_mismatches = 0;
  int64_t differing_rows_with_equal_scores = 0;
  std::string first_topk_difference, first_select_difference;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<int32_t> g(got.begin() + t * k, got.begin() + (t + 1) * k);
    const std::vector<int32_t> cw(want.begin() + t * k, want.begin() + (t + 1) * k);
    const std::vector<int32_t> from_gpu_scores = host_topk(gpu_scores.data() + t * stride, visible[t], k);
    const std::vector<int32_t> from_cpu_scores = host_topk(cpu_scores.data() + t * stride, visible[t], k);
    if (g != from_gpu_scores && select_mismatches++ == 0) {
      size_t i = 0;
      while (g[i] == from_gpu_scores[i]) ++i;
      first_select_difference = "token " + std::to_string(t) + " (" + std::to_string(visible[t]) +
                                " visible) slot " + std::to_string(i) + ": kernel id " + std::to_string(g[i]) +
                                ", host selection of the kernel's scores id " + std::to_string(from_gpu_scores[i]);
    }
    cpu_select_mismatches += cw != from_cpu_scores;
    if (g == cw) {
      ++rows_identical;
      continue;
    }
    differing_rows_with_equal_scores += row_scores_equal[t] ? 1 : 0;
    const std::vector<int32_t> extra = missing_from(g, cw, 4), lacking = missing_from(cw, g, 4);
    ids_only_gpu += static_cast<int64_t>(missing_from(g, cw, SIZE_MAX).size());
    if (first_topk_difference.empty()) {
      first_topk_difference = "token " + std::to_string(t) + " (" + std::to_string(visible[t]) + " visible):";
      for (int32_t id : extra)
        first_topk_difference += " gpu-only " + std::to_string(id) + " [gpu " +
                                 describe_score(gpu_scores[t * stride + id]) + " cpu " +
                                 describe_score(cpu_scores[t * stride + id]) + "]";
      for (int32_t id : lacking)
        first_topk_difference += " cpu-only " + std::to_string(id) + " [gpu " +
                                 describe_score(gpu_scores[t * stride + id]) + " cpu " +
                                 describe_score(cpu_scores[t * stride + id]) + "]";
      if (extra.empty() && lacking.empty()) first_topk_difference += " same ids, different order or padding";
    }
  }

  // The exactness argument of indexer_mma_scores.cu needs each (q head, key) block-exponent
  // spread D <= 9; the spread of the blocks' largest magnitudes bounds it (D <= spread + 2).
  int max_spread = 0;
  int64_t spread_over_7 = 0;
  if (c.inputs == Inputs::kFp4Qat) {
    const std::vector<int> qe = block_exponents(qf, dh);
    std::vector<std::vector<int>> ke;
    for (const std::vector<float>& v : kf) ke.push_back(block_exponents(v, dh));
    const int64_t blocks = dh / 32;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < visible[t]; ++j) {
          int lo = INT_MAX, hi = INT_MIN;
          for (int64_t b = 0; b < blocks; ++b) {
            const int x = qe[(t * heads + h) * blocks + b], y = ke[key_index_of_token[t]][j * blocks + b];
            if (x == INT_MIN || y == INT_MIN) continue;
            lo = std::min(lo, x + y);
            hi = std::max(hi, x + y);
          }
          if (hi < lo) continue;
          max_spread = std::max(max_spread, hi - lo);
          spread_over_7 += hi - lo > 7;
        }
  }

  std::printf("[measured] indexer %-34s %-34s scores differing %lld/%lld (%lld rows), max rel %.3e; top-k rows "
              "identical %lld/%lld, gpu-only ids %lld; block spread max %d (%lld pairs > 7)\n",
              c.name.c_str(), kernels::indexer_score_kernel_name(kernel), static_cast<long long>(differing),
              static_cast<long long>(total), static_cast<long long>(rows_differing), max_rel,
              static_cast<long long>(rows_identical), static_cast<long long>(T), static_cast<long long>(ids_only_gpu),
              max_spread, static_cast<long long>(spread_over_7));

  // Always: the kernel's top-k is the selection of its scores, and CpuOps' is the selection of
  // cpu::indexer_score_row's (the scores compared above are the ones each op ranks).
  EXPECT_EQ(select_mismatches, 0) << c.name << ": " << first_select_difference;
  EXPECT_EQ(cpu_select_mismatches, 0) << c.name << ": CpuOps' top-k is not the selection of indexer_score_row";
  // Rows whose scores agree bit for bit agree in their top-k.
  EXPECT_EQ(differing_rows_with_equal_scores, 0) << c.name << ": " << first_topk_difference;
  if (kernel == IndexerScoreKernel::kExact) {
    EXPECT_EQ(differing, 0) << c.name << ": " << first_difference;
    EXPECT_EQ(rows_identical, T) << c.name << ": " << first_topk_difference;
  } else if (c.inputs == Inputs::kFp4Qat) {
    // The argument says every score is equal; allow a hardware surprise of 1 in 10^4 scores,
    // each within 1e-6 relative, and no more top-k rows differing than rows of differing scores.
    EXPECT_LE(differing * 10000, total) << c.name << ": " << first_difference;
    EXPECT_LE(max_rel, 1e-6) << c.name << ": " << first_difference;
    EXPECT_LE(T - rows_identical, rows_differing) << c.name << ": " << first_topk_difference;
  } else {
    // Plain bf16 (not the model's inputs): sums of exact products rounded in another order.
    EXPECT_LE(max_rel, 1e-4) << c.name << ": " << first_difference;
    EXPECT_LE(ids_only_gpu * 100, T * std::min<int64_t>(k, stride) + 1) << c.name << ": " << first_topk_difference;
  }

  // The same keys packed as MXFP4 keys hold the same values (they are FP4-QAT'd), so the
  // tensor-core kernel gives the same scores and the op the same top-k, bit for bit.
  if (c.inputs != Inputs::kFp4Qat || kernel != IndexerScoreKernel::kTensorCoreBf16) return;
  std::vector<PagedKeys> packed;
  std::vector<IndexerSeq> packed_seqs;
  for (size_t s = 0; s < slices.size(); ++s) {
    packed.push_back(paged_keys(key_hosts[s], true));
    packed_seqs.push_back({slices[s], packed.back().gpu()});
  }
  const DeviceTensor topk_packed = gpu_->alloc(DType::kI32, {T, k});
  DSV4_CUDA_CHECK(cudaMemsetAsync(topk_packed.view().bytes(), 0xa5, topk_packed.view().nbytes(), gpu_->stream()));
  gpu_->indexer_topk({q.gpu.view(), w.gpu.view(), weight_scale, kRatio, positions.gpu.view(), packed_seqs,
                      topk_packed.view()});
  EXPECT_EQ(ints(*gpu_, topk_packed), got) << c.name << ": the top-k of packed keys";
  for (kernels::IndexerSeqDesc& desc : descs) {
    const size_t s = key_index_of_token[static_cast<size_t>(desc.token_begin)];
    desc.keys = {packed[s].pool.gpu.view().bytes(), false};
    desc.key_pages = page_table(packed[s].gpu());
  }
  d_descs.upload(descs);
  d_scores.poison();
  kp.packed_keys = true;
  gpu_->synchronize();
  kernels::indexer_scores(kp, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> packed_scores = d_scores.download();
  int64_t packed_differing = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < visible[t]; ++j)
      packed_differing += float_bits(packed_scores[t * stride + j]) != float_bits(gpu_scores[t * stride + j]);
  EXPECT_EQ(packed_differing, 0) << c.name << ": scores of packed keys against bf16 keys";
}

// Decode at 8k context: one token per sequence, positions spread below 8192 (up to 2048 keys).
std::vector<SeqSlice> decode_slices(int64_t batch, int64_t step) {
  std::vector<SeqSlice> out;
  for (int64_t s = 0; s < batch; ++s) out.push_back({0, 1, 8191 - step * s});
  return out;
}

IndexerCase flash_case(std::string name, std::vector<SeqSlice> slices, DType dtype = DType::kBF16,
                       Inputs inputs = Inputs::kFp4Qat) {
  return {std::move(name), kFlashHeads, kFlashDh, kFlashTopk, dtype, inputs, std::move(slices), 0};
}

TEST_F(IndexerCudaTest, DecodeBatch1At8k) { run_case(flash_case("decode b=1 8k", decode_slices(1, 0))); }

TEST_F(IndexerCudaTest, DecodeBatch16At8k) { run_case(flash_case("decode b=16 8k", decode_slices(16, 37))); }

TEST_F(IndexerCudaTest, DecodeBatch64At8k) { run_case(flash_case("decode b=64 8k", decode_slices(64, 13))); }

// 1024 tokens at positions 7168..8191: 1792..2048 keys each.
TEST_F(IndexerCudaTest, Prefill1024TokensAt7k) { run_case(flash_case("prefill 1024 at 7168", {{0, 1024, 7168}})); }

// A prefill from position 0 (no keys for the first 3 tokens, fewer than k for most), decode
// tokens at 8k, mid-context and with one key, and a chunk whose tokens see k-2 .. k+22 keys.
TEST_F(IndexerCudaTest, MixedBatchOfSequencesAtDifferentPositions) {
  run_case(flash_case("mixed batch", {{0, 600, 0}, {0, 1, 8191}, {0, 1, 5000}, {0, 1, 3}, {0, 100, 2039}}));
}

// Exact math (fp32): the exact kernel, bit for bit.
TEST_F(IndexerCudaTest, ExactMathIsBitExact) {
  run_case(flash_case("exact f32 decode+prefill", {{0, 1, 8191}, {0, 1, 6001}, {0, 64, 3000}}, DType::kF32,
                      Inputs::kPlain));
}

// bf16 values that were not QAT'd: the tensor-core kernel's sums may round (measured, loosely bounded).
TEST_F(IndexerCudaTest, PlainBf16DecodeBatch16) {
  run_case(flash_case("plain bf16 decode b=16 8k", decode_slices(16, 37), DType::kBF16, Inputs::kPlain));
}

// The tiny model's 4 heads, exact ties (repeated and zero keys), fewer candidates than k and none.
TEST_F(IndexerCudaTest, ToyFourHeadsWithTies) {
  run_case({"toy 4 heads ties", 4, kFlashDh, 16, DType::kBF16, Inputs::kFp4Qat,
            {{0, 30, 0}, {0, 2, 63}, {0, 6, 97}, {0, 3, 1000}}, 37});
}

// Heads that do not fill the last 16-row MMA tile.
TEST_F(IndexerCudaTest, ToyTwentyHeads) {
  run_case({"toy 20 heads", 20, kFlashDh, 32, DType::kBF16, Inputs::kFp4Qat, {{0, 5, 300}, {0, 40, 90}}, 0});
}

// More heads than the tensor-core kernel takes: the exact kernel, bit for bit.
TEST_F(IndexerCudaTest, ToyEightyHeadsTakeTheExactKernel) {
  run_case({"toy 80 heads", 80, kFlashDh, 32, DType::kBF16, Inputs::kFp4Qat, {{0, 4, 500}}, 0});
}

// A head dim other than 128: the exact kernel.
TEST_F(IndexerCudaTest, ToyHeadDim64TakesTheExactKernel) {
  run_case({"toy dh 64", 8, 64, 16, DType::kBF16, Inputs::kFp4Qat, {{0, 3, 200}}, 0});
}

// No token sees a key: every row is -1.
TEST_F(IndexerCudaTest, NoVisibleKeys) {
  run_case(flash_case("no visible keys", {{0, 3, 0}}));
}

// ---- the top-k kernel alone -------------------------------------------------------------------

class IndexerSelectTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { DSV4_SKIP_WITHOUT_GPU(); }
};

TEST_P(IndexerSelectTest, MatchesHostSelectionOnCraftedRows) {
  const int64_t k = GetParam();
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, std::vector<float>>> rows;
  rows.push_back({"all equal", std::vector<float>(3000, 1.0f)});
  {
    std::vector<float> v(2048);
    for (size_t j = 0; j < v.size(); ++j) v[j] = j % 3 == 0 ? 2.0f : 1.0f;
    rows.push_back({"two levels", v});
  }
  {
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, -1.5f, 3.0f, -0.0f, 0.0f, 1e-30f, -1e30f};
    std::vector<float> v(1500);
    for (size_t j = 0; j < v.size(); ++j) v[j] = specials[(j * 7) % 10];
    rows.push_back({"signed zeros and infinities", v});
  }
  {
    std::uniform_real_distribution<float> u(1.0f, 2.0f);
    std::vector<float> v(2048);
    for (float& x : v) x = u(rng);
    rows.push_back({"one top-byte bin", v});
  }
  {
    std::vector<float> v(4096);
    for (size_t j = 0; j < v.size(); ++j)
      v[j] = bits_float(float_bits(1.0f) + static_cast<uint32_t>((j * 7919) % v.size()));
    rows.push_back({"distinct in the low bits", v});
  }
  {
    std::vector<float> v(4096);
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>((j * 37) % 41) - 20.0f;
    rows.push_back({"41 values, ties at the threshold", v});
  }
  for (const int64_t n : {int64_t{2048}, int64_t{16384}, int64_t{70000}}) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    rows.push_back({"normal " + std::to_string(n), v});
  }
  for (const int64_t n : {k - 1, k, k + 1, int64_t{1}, int64_t{0}}) {
    if (n < 0) continue;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(j % 5);
    rows.push_back({"length " + std::to_string(n), v});
  }

  // Row r is a sequence of its own at ratio 1 whose one token sees rows[r].size() entries.
  const auto R = static_cast<int64_t>(rows.size());
  int64_t stride = 1;
  for (const auto& r : rows) stride = std::max(stride, static_cast<int64_t>(r.second.size()));
  std::vector<float> scores(static_cast<size_t>(R * stride), std::numeric_limits<float>::quiet_NaN());
  std::vector<kernels::IndexerSeqDesc> descs;
  std::vector<int32_t> seq_of_token, positions;
  for (int64_t r = 0; r < R; ++r) {
    const std::vector<float>& v = rows[static_cast<size_t>(r)].second;
    std::copy(v.begin(), v.end(), scores.begin() + r * stride);
    descs.push_back({r, {}, {}});
    seq_of_token.push_back(static_cast<int32_t>(r));
    positions.push_back(static_cast<int32_t>(v.size()) - 1);  // at ratio 1: v.size() visible entries
  }
  DeviceBuffer<float> d_scores(scores.size());
  DeviceBuffer<kernels::IndexerSeqDesc> d_descs(descs.size());
  DeviceBuffer<int32_t> d_seq_of_token(seq_of_token.size()), d_positions(positions.size());
  DeviceBuffer<int32_t> d_topk(static_cast<size_t>(R * k));
  d_scores.upload(scores);
  d_descs.upload(descs);
  d_seq_of_token.upload(seq_of_token);
  d_positions.upload(positions);
  d_topk.poison();
  kernels::IndexerTopkParams kp;
  kp.seqs = d_descs.get();
  kp.seq_of_token = d_seq_of_token.get();
  kp.positions = d_positions.get();
  kp.scores = d_scores.get();
  kp.topk = d_topk.get();
  kp.tokens = R;
  kp.ratio = 1;
  kp.score_stride = stride;
  kp.k = k;
  // Each row's CTAs: by size (a cluster of 8 here), one, and clusters of 2 and 4.
  for (const int ctas : {0, 1, 2, 4}) {
    kp.topk_ctas = ctas;
    d_topk.poison();
    kernels::indexer_select_topk(kp, nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<int32_t> got = d_topk.download();

    for (int64_t r = 0; r < R; ++r) {
      const auto& [name, v] = rows[static_cast<size_t>(r)];
      const std::vector<int32_t> want = host_topk(v.data(), static_cast<int64_t>(v.size()), k);
      const std::vector<int32_t> row(got.begin() + r * k, got.begin() + (r + 1) * k);
      if (row == want) continue;
      size_t i = 0;
      while (row[i] == want[i]) ++i;
      const auto value_of = [&](int32_t id) {
        return id >= 0 && id < static_cast<int32_t>(v.size()) ? describe_score(v[static_cast<size_t>(id)])
                                                              : std::string("-");
      };
      ADD_FAILURE() << "k=" << k << ", " << ctas << " CTAs (0: by size): row '" << name << "' (" << v.size()
                    << " entries): slot " << i << " holds id " << row[i] << " (score " << value_of(row[i])
                    << "), expected " << want[i] << " (score " << value_of(want[i]) << "); "
                    << missing_from(row, want, SIZE_MAX).size() << " ids chosen that should not be";
    }
  }
}

// The split follows the rows' room and the batch: one CTA where its registers hold a row, a
// cluster holding the row in registers where they do not, no more blocks than the GPU's SMs.
TEST(IndexerTopkCtas, FollowTheRowsAndTheBatch) {
  EXPECT_EQ(kernels::indexer_topk_ctas_for(1, 2048), 1);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(1, 2560), 1);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(1, 2561), 2);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(1, 8192), 4);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(1, 16384), 8);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(1, 1 << 20), 8);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(16, 16384), 8);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(32, 16384), 4);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(64, 16384), 2);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(65, 16384), 1);
  EXPECT_EQ(kernels::indexer_topk_ctas_for(8192, 2048), 1);
}

INSTANTIATE_TEST_SUITE_P(K, IndexerSelectTest, ::testing::Values(int64_t{512}, int64_t{16}, int64_t{1}),
                         [](const ::testing::TestParamInfo<int64_t>& info) { return "k" + std::to_string(info.param); });

}  // namespace
}  // namespace dsv4
