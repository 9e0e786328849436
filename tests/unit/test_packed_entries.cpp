// The packed cache entries of kv/packed_entries.h: where an entry's bytes go in its page, and that
// a row the forward's QAT has rounded (e4m3 with a pow2 scale per 64 nope dims, bf16 rope dims;
// e2m1 with a pow2 scale per 32 key dims) comes back from encode and decode bit for bit, signed
// zeros and the amax floors included, while an unrounded one does not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "core/quant.h"
#include "kv/packed_entries.h"

namespace dsv4 {
namespace {

using L = Fp8CacheLayout;
using K = Mxfp4KeyLayout;

bool same_bits(const float* a, const float* b, int n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }

// A kv row as the forward caches it: random values over many magnitudes (one block of tiny ones,
// under the fp8 amax floor, one of zeros and negative zeros), nope dims QAT-rounded per 64, rope
// dims rounded to bf16.
std::vector<float> qat_kv_row(std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 6);
  std::vector<float> row(L::kHeadDim);
  for (int b = 0; b < L::kNopeDim; b += L::kQuantBlock) {
    const float scale = b == 64 ? 1e-7f : std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < L::kQuantBlock; ++i) row[b + i] = b == 128 ? (i % 2 ? -0.0f : 0.0f) : normal(rng) * scale;
    fake_quant_block_e4m3(row.data() + b, L::kQuantBlock);
  }
  for (int i = L::kNopeDim; i < L::kHeadDim; ++i) row[i] = round_bf16(normal(rng) * 3.0f);
  for (float& v : row) v = round_bf16(v);
  return row;
}

TEST(Fp8CacheLayout, AnEntrysDataAndScalesSitInItsPage) {
  const L layout{16};
  EXPECT_EQ(L::kEntryBytes, 584);
  EXPECT_EQ(layout.page_bytes(), 16 * 584);
  EXPECT_EQ(layout.data_offset(0), 0);
  EXPECT_EQ(layout.data_offset(3), 3 * 576);
  EXPECT_EQ(layout.scale_offset(3), 16 * 576 + 3 * 8);
  EXPECT_EQ(layout.data_offset(16 + 5), 16 * 584 + 5 * 576);
  EXPECT_EQ(layout.scale_offset(16 + 5), 16 * 584 + 16 * 576 + 5 * 8);
}

TEST(Mxfp4KeyLayout, AKeysCodesAndScalesSitInItsPage) {
  const K layout{4};
  EXPECT_EQ(K::kEntryBytes, 68);
  EXPECT_EQ(layout.code_offset(2), 2 * 64);
  EXPECT_EQ(layout.scale_offset(2), 4 * 64 + 2 * 4);
  EXPECT_EQ(layout.code_offset(4 + 1), 4 * 68 + 64);
  EXPECT_EQ(layout.scale_offset(4 + 1), 4 * 68 + 4 * 64 + 4);
}

TEST(PackedEntries, QatRoundedKvRowsComeBackBitForBit) {
  std::mt19937 rng(7);
  const L layout{3};
  std::vector<uint8_t> pool(static_cast<size_t>(2 * layout.page_bytes()), 0xAB);
  std::vector<std::vector<float>> rows;
  for (int slot = 0; slot < 6; ++slot) {
    rows.push_back(qat_kv_row(rng));
    encode_fp8_entry(rows.back().data(), layout, slot, pool.data());
  }
  for (int slot = 0; slot < 6; ++slot) {  // later entries left earlier ones alone
    float back[L::kHeadDim];
    decode_fp8_entry(pool.data(), layout, slot, back);
    EXPECT_TRUE(same_bits(back, rows[static_cast<size_t>(slot)].data(), L::kHeadDim)) << "slot " << slot;
    EXPECT_EQ(pool[static_cast<size_t>(layout.scale_offset(slot) + L::kScalesPerEntry)], 0) << "pad byte";
  }
  EXPECT_TRUE(std::signbit(rows[0][129]));

  // A row the QAT has not rounded loses bits: the codec stores, it does not round for the forward.
  std::vector<float> raw(L::kHeadDim);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : raw) v = normal(rng);
  float back[L::kHeadDim];
  encode_fp8_entry(raw.data(), layout, 0, pool.data());
  decode_fp8_entry(pool.data(), layout, 0, back);
  EXPECT_FALSE(same_bits(back, raw.data(), L::kNopeDim));
}

TEST(PackedEntries, FourBitRoundedKeysComeBackBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const K layout{5};
  std::vector<uint8_t> pool(static_cast<size_t>(2 * layout.page_bytes()), 0xCD);
  std::vector<std::vector<float>> keys;
  for (int slot = 0; slot < 10; ++slot) {
    std::vector<float> key(K::kDim);
    for (int b = 0; b < K::kDim; b += K::kQuantBlock) {
      const float scale = b == 32 && slot == 1 ? 1e-39f : std::ldexp(1.0f, slot - 4 + b / 32);
      for (int i = 0; i < K::kQuantBlock; ++i) key[static_cast<size_t>(b + i)] = normal(rng) * scale;
      fake_quant_block_e2m1(key.data() + b, K::kQuantBlock);
    }
    for (float& v : key) v = round_bf16(v);
    keys.push_back(key);
    encode_mxfp4_key(key.data(), layout, slot, pool.data());
  }
  for (int slot = 0; slot < 10; ++slot) {
    float back[K::kDim];
    decode_mxfp4_key(pool.data(), layout, slot, back);
    EXPECT_TRUE(same_bits(back, keys[static_cast<size_t>(slot)].data(), K::kDim)) << "slot " << slot;
  }
}

// The KV canary fills packed pages with 0xFF: every value read from such an entry is NaN.
TEST(PackedEntries, AllOnesBytesDecodeToNan) {
  std::vector<uint8_t> attention(static_cast<size_t>(L{2}.page_bytes()), 0xFF);
  float row[L::kHeadDim];
  decode_fp8_entry(attention.data(), L{2}, 1, row);
  for (float v : row) EXPECT_TRUE(std::isnan(v));
  std::vector<uint8_t> keys(static_cast<size_t>(K{2}.page_bytes()), 0xFF);
  float key[K::kDim];
  decode_mxfp4_key(keys.data(), K{2}, 1, key);
  for (float v : key) EXPECT_TRUE(std::isnan(v));
}

TEST(PackedEntries, CacheTensorsNameTheirEntriesByDtypeAndWidth) {
  EXPECT_EQ(packed_entry(DType::kU8, 584), PackedEntry::kFp8Attention);
  EXPECT_EQ(packed_entry(DType::kU8, 68), PackedEntry::kMxfp4Key);
  EXPECT_EQ(packed_entry(DType::kU8, 512), PackedEntry::kNone);
  EXPECT_EQ(packed_entry(DType::kBF16, 584), PackedEntry::kNone);
  EXPECT_EQ(unpacked_width(DType::kU8, 584), 512);
  EXPECT_EQ(unpacked_width(DType::kU8, 68), 128);
  EXPECT_EQ(unpacked_width(DType::kBF16, 512), 512);
  EXPECT_TRUE(cache_rows_hold(DType::kU8, 584, 512));
  EXPECT_TRUE(cache_rows_hold(DType::kBF16, 512, 512));
  EXPECT_TRUE(cache_rows_hold(DType::kF32, 128, 128));
  EXPECT_FALSE(cache_rows_hold(DType::kU8, 584, 128));
  EXPECT_FALSE(cache_rows_hold(DType::kU8, 512, 512));
  EXPECT_FALSE(cache_rows_hold(DType::kI32, 512, 512));
  EXPECT_EQ(cache_storage_dtype(DType::kF8E4M3), DType::kU8);
  EXPECT_EQ(cache_storage_dtype(DType::kBF16), DType::kBF16);
  EXPECT_EQ(cache_stored_width(DType::kF8E4M3, 512), 584);
  EXPECT_EQ(cache_stored_width(DType::kF8E4M3, 128), 68);
  EXPECT_THROW(cache_stored_width(DType::kF8E4M3, 256), UsageError);
  EXPECT_EQ(cache_stored_width(DType::kF32, 256), 256);
}

}  // namespace
}  // namespace dsv4
