// The paged FP8 cache writer (bit for bit against host quantisation) and sparse attention with
// a sink (against a double-precision host loop) on the GPU. Skips where no GPU exists.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "core/quant.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/attention/sparse_attn.h"
#include "kv/fp8_cache_layout.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;
using L = Fp8CacheLayout;

// Host model of one cache entry: the values attention sees after the FP8 round trip.
std::vector<float> host_entry(const uint16_t* kv, std::vector<uint8_t>* codes, std::vector<uint8_t>* scales) {
  std::vector<float> v(L::kHeadDim);
  for (int d = 0; d < L::kHeadDim; ++d) v[d] = bf16_to_float(kv[d]);
  codes->assign(L::kNopeDim, 0);
  scales->assign(L::kScaleBytes, 0);
  for (int b = 0; b < L::kScalesPerEntry; ++b) {
    (*scales)[b] = quantize_block_e4m3(&v[b * 64], 64, codes->data() + b * 64);
    for (int i = 0; i < 64; ++i) v[b * 64 + i] = e4m3_to_float((*codes)[b * 64 + i]) * e8m0_to_float((*scales)[b]);
  }
  return v;
}

TEST(AttentionCuda, CacheInsertAndSparseAttentionMatchHost) {
  DSV4_SKIP_WITHOUT_GPU();
  const Fp8CacheLayout layout{64};
  const int pages = 5, rows = 200, t = 6, h = 12, k = 70;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::vector<uint16_t> kv(rows * L::kHeadDim);
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < L::kHeadDim; ++d) kv[r * L::kHeadDim + d] = float_to_bf16(normal(rng) * (1 + r % 5));
  std::vector<int64_t> slot_of_row(pages * layout.block_size);
  std::iota(slot_of_row.begin(), slot_of_row.end(), 0);
  std::shuffle(slot_of_row.begin(), slot_of_row.end(), rng);
  slot_of_row.resize(rows);
  slot_of_row[7] = -1;  // a skipped row

  DeviceBuffer<uint16_t> dkv(kv.size());
  DeviceBuffer<int64_t> dslots(slot_of_row.size());
  DeviceBuffer<uint8_t> dcache(static_cast<size_t>(pages * layout.page_bytes()));
  dkv.upload(kv);
  dslots.upload(slot_of_row);
  dcache.poison();
  kernels::kv_cache_insert_fp8({dkv.get(), dslots.get(), dcache.get(), layout, rows}, nullptr);

  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const auto cache = dcache.download();
  std::vector<std::vector<float>> entry(rows);
  for (int r = 0; r < rows; ++r) {
    std::vector<uint8_t> codes, scales;
    entry[r] = host_entry(&kv[r * L::kHeadDim], &codes, &scales);
    const int64_t slot = slot_of_row[r];
    if (slot < 0) continue;
    const uint8_t* data = &cache[layout.data_offset(slot)];
    for (int d = 0; d < L::kNopeDim; ++d) ASSERT_EQ(data[d], codes[d]) << "row " << r << " dim " << d;
    for (int d = 0; d < L::kRopeDim; ++d)
      ASSERT_EQ(reinterpret_cast<const uint16_t*>(data + L::kNopeDim)[d], kv[r * L::kHeadDim + L::kNopeDim + d]);
    for (int b = 0; b < L::kScaleBytes; ++b) ASSERT_EQ(cache[layout.scale_offset(slot) + b], scales[b]) << r;
  }

  // Attention: each token attends to a random subset of the written rows, padded with -1.
  std::vector<uint16_t> q(t * h * L::kHeadDim);
  for (auto& v : q) v = float_to_bf16(normal(rng) * 0.05f);
  std::vector<float> sink(h);
  for (auto& v : sink) v = normal(rng);
  std::vector<int32_t> slots(t * k, -1);
  std::vector<std::vector<int>> chosen(t);
  for (int i = 0; i < t; ++i) {
    const int count = i == t - 1 ? 0 : 1 + static_cast<int>(rng() % k);  // the last token sees nothing
    for (int j = 0; j < count; ++j) {
      int r;
      do r = static_cast<int>(rng() % rows); while (slot_of_row[r] < 0);
      chosen[i].push_back(r);
      slots[i * k + j] = static_cast<int32_t>(slot_of_row[r]);
    }
  }
  DeviceBuffer<uint16_t> dq(q.size()), dout(q.size());
  DeviceBuffer<int32_t> dattn_slots(slots.size());
  DeviceBuffer<float> dsink(sink.size());
  dq.upload(q);
  dattn_slots.upload(slots);
  dsink.upload(sink);
  dout.poison();
  const float scale = 1.0f / std::sqrt(512.0f);
  kernels::sparse_attn_fp8({dq.get(), dcache.get(), layout, dattn_slots.get(), dsink.get(), dout.get(), t, h, k, scale},
                           nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = dout.download();

  for (int i = 0; i < t; ++i)
    for (int hh = 0; hh < h; ++hh) {
      std::vector<double> z;
      double zmax = -INFINITY;
      for (int r : chosen[i]) {
        double dot = 0;
        for (int d = 0; d < L::kHeadDim; ++d) dot += bf16_to_float(q[(i * h + hh) * L::kHeadDim + d]) * entry[r][d];
        z.push_back(dot * scale);
        zmax = std::max(zmax, z.back());
      }
      std::vector<double> want(L::kHeadDim, 0.0);
      if (!z.empty()) {
        double den = std::exp(sink[hh] - zmax);
        for (double v : z) den += std::exp(v - zmax);
        for (size_t j = 0; j < z.size(); ++j)
          for (int d = 0; d < L::kHeadDim; ++d) want[d] += std::exp(z[j] - zmax) / den * entry[chosen[i][j]][d];
      }
      double err2 = 0, ref2 = 0;
      for (int d = 0; d < L::kHeadDim; ++d) {
        const double got = bf16_to_float(out[(i * h + hh) * L::kHeadDim + d]);
        err2 += (got - want[d]) * (got - want[d]);
        ref2 += want[d] * want[d];
      }
      if (z.empty()) {
        EXPECT_EQ(err2, 0.0) << "token " << i << " head " << hh << " has no entries: output must be zero";
      } else {
        EXPECT_LT(std::sqrt(err2 / ref2), 5e-3) << "token " << i << " head " << hh;
      }
    }
}

}  // namespace
}  // namespace dsv4
