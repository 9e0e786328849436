// kernels::unpack_cache_pages against the host codec (kv/packed_entries.h): FP8 attention entries
// and MXFP4 indexer keys in pages of an odd number of entries (entries at every alignment their
// size allows), a block table's pages in any order, a -1 page and an id past the pool (no rows
// written, -1 in the table slot), and a window ring (a page of its own, no table). Skips where no
// GPU exists.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "kernels/attention/kv_cache.h"
#include "kv/packed_entries.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

// Random entry bytes: codes that are not NaN, scales between 2^-10 and 2^9.
std::vector<uint8_t> random_pages(PackedEntry kind, int64_t pages, int page_rows, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255), scale(117, 136);
  const bool attention = kind == PackedEntry::kFp8Attention;
  const int64_t page_bytes = attention ? Fp8CacheLayout{page_rows}.page_bytes() : Mxfp4KeyLayout{page_rows}.page_bytes();
  std::vector<uint8_t> bytes(static_cast<size_t>(pages * page_bytes));
  for (uint8_t& b : bytes) {
    b = static_cast<uint8_t>(byte(rng));
    if (attention && (b & 0x7f) == 0x7f) b = 0x7e;  // e4m3's NaN codes
  }
  for (int64_t slot = 0; slot < pages * page_rows; ++slot) {
    if (attention) {
      const Fp8CacheLayout layout{page_rows};
      for (int b = 0; b < Fp8CacheLayout::kScaleBytes; ++b)
        bytes[static_cast<size_t>(layout.scale_offset(slot) + b)] = static_cast<uint8_t>(scale(rng));
      for (int i = 0; i < Fp8CacheLayout::kRopeDim; ++i)  // rope dims: bf16 of a normal value
        bytes[static_cast<size_t>(layout.data_offset(slot) + Fp8CacheLayout::kNopeDim + 2 * i + 1)] &= 0xbf;
    } else {
      const Mxfp4KeyLayout layout{page_rows};
      for (int b = 0; b < Mxfp4KeyLayout::kScaleBytes; ++b)
        bytes[static_cast<size_t>(layout.scale_offset(slot) + b)] = static_cast<uint8_t>(scale(rng));
    }
  }
  return bytes;
}

// Entry `slot` of the pages as bf16, as the host codec decodes it.
std::vector<uint16_t> host_entry(PackedEntry kind, const std::vector<uint8_t>& pool, int page_rows, int64_t slot) {
  std::vector<float> values(kind == PackedEntry::kFp8Attention ? Fp8CacheLayout::kHeadDim : Mxfp4KeyLayout::kDim);
  if (kind == PackedEntry::kFp8Attention) decode_fp8_entry(pool.data(), Fp8CacheLayout{page_rows}, slot, values.data());
  else decode_mxfp4_key(pool.data(), Mxfp4KeyLayout{page_rows}, slot, values.data());
  std::vector<uint16_t> bits;
  for (const float v : values) bits.push_back(float_to_bf16(v));
  return bits;
}

class UnpackCachePagesTest : public ::testing::TestWithParam<PackedEntry> {};

TEST_P(UnpackCachePagesTest, GivesTheHostCodecsValues) {
  DSV4_SKIP_WITHOUT_GPU();
  const PackedEntry kind = GetParam();
  const int width = kind == PackedEntry::kFp8Attention ? Fp8CacheLayout::kHeadDim : Mxfp4KeyLayout::kDim;
  constexpr int kPageRows = 5, kRingRows = 7;
  constexpr int64_t kPoolPages = 6;
  std::mt19937 rng(11);
  const std::vector<uint8_t> pool = random_pages(kind, kPoolPages, kPageRows, rng);
  const std::vector<uint8_t> ring = random_pages(kind, 1, kRingRows, rng);
  DeviceBuffer<uint8_t> pool_d(pool.size()), ring_d(ring.size());
  pool_d.upload(pool);
  ring_d.upload(ring);
  const std::vector<int32_t> table = {3, -1, 0, 9, 5};  // 9: past the pool
  DeviceBuffer<int32_t> table_d(table.size()), slots_d(table.size());
  table_d.upload(table);
  slots_d.poison();

  const int64_t ring_row = static_cast<int64_t>(table.size()) * kPageRows, rows = ring_row + kRingRows;
  std::vector<kernels::UnpackPageJob> jobs;
  for (size_t i = 0; i < table.size(); ++i)
    jobs.push_back({pool_d.get(), table_d.get() + i, kPoolPages, static_cast<int64_t>(i) * kPageRows,
                    slots_d.get() + i, kPageRows});
  jobs.push_back({ring_d.get(), nullptr, 1, ring_row, nullptr, kRingRows});
  DeviceBuffer<kernels::UnpackPageJob> jobs_d(jobs.size());
  jobs_d.upload(jobs);
  DeviceBuffer<uint16_t> rows_d(static_cast<size_t>(rows * width));
  rows_d.poison();
  kernels::unpack_cache_pages({jobs_d.get(), static_cast<int64_t>(jobs.size()), kRingRows, kind, rows_d.get()}, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = rows_d.download();
  const std::vector<int32_t> slots = slots_d.download();

  const auto row_of = [&](int64_t r) {
    return std::vector<uint16_t>(got.begin() + r * width, got.begin() + (r + 1) * width);
  };
  const std::vector<uint16_t> poison(static_cast<size_t>(width), 0xa5a5);
  for (size_t i = 0; i < table.size(); ++i) {
    const bool exists = table[i] >= 0 && table[i] < kPoolPages;
    EXPECT_EQ(slots[i], exists ? static_cast<int32_t>(i) : -1) << "table slot " << i;
    for (int e = 0; e < kPageRows; ++e) {
      const int64_t r = static_cast<int64_t>(i) * kPageRows + e;
      EXPECT_EQ(row_of(r), exists ? host_entry(kind, pool, kPageRows, table[i] * kPageRows + e) : poison)
          << "page " << table[i] << " entry " << e;
    }
  }
  for (int e = 0; e < kRingRows; ++e)
    EXPECT_EQ(row_of(ring_row + e), host_entry(kind, ring, kRingRows, e)) << "ring entry " << e;
}

INSTANTIATE_TEST_SUITE_P(Kinds, UnpackCachePagesTest,
                         ::testing::Values(PackedEntry::kFp8Attention, PackedEntry::kMxfp4Key),
                         [](const ::testing::TestParamInfo<PackedEntry>& info) {
                           return std::string(info.param == PackedEntry::kFp8Attention ? "Fp8Attention" : "Mxfp4Key");
                         });

}  // namespace
}  // namespace dsv4
