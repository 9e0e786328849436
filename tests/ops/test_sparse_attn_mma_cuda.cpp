// The default numerics' two sparse attention kernels (kernels::sparse_attn_mma: WGMMA for 64 heads
// a CTA, its splits merged by a kernel after it or by their last CTA, or a CTA running a token's
// splits in turn; mma.sync otherwise, with 16, 32 or 64 heads a CTA and the output dims in 1, 2 or
// 4 parts) give the same bits for the same launch: window entries from the ring and from the
// batch, compressed entries valid, -1, not yet visible and without a page, one split or several, a
// partial head block and two head blocks; and each of them over packed FP8 entries
// (kv/packed_entries.h) gives the bits of the same values as rows. Skips where no GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "core/quant.h"
#include "kernels/attention/sparse_attn_mma.h"
#include "kernels/sm_count.h"
#include "kv/packed_entries.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

struct WgmmaCase {
  const char* name;
  int64_t heads;
  int64_t ratio;  // 0: window only; 4 with top-k; 128 all visible compressed entries
  int64_t tokens;
  int64_t start_pos;
};

class SparseAttnWgmmaTest : public ::testing::TestWithParam<WgmmaCase> {};

constexpr int64_t kD = kernels::kSparseAttnMmaHeadDim;

std::vector<uint16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = float_to_bf16(dist(rng));
  return v;
}

// Random entry rows on the grid of the packed cache entries (e4m3 with a pow2 scale per 64 nope
// dims, bf16 rope dims), where the forward's QAT leaves every cached row.
std::vector<uint16_t> random_entry_rows(int64_t rows, std::mt19937& rng) {
  std::vector<uint16_t> v = random_bf16(static_cast<size_t>(rows * kD), 1.0f, rng);
  std::vector<float> row(kD);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < kD; ++i) row[i] = bf16_to_float(v[r * kD + i]);
    for (int b = 0; b < Fp8CacheLayout::kScalesPerEntry; ++b)
      fake_quant_block_e4m3(row.data() + b * Fp8CacheLayout::kQuantBlock, Fp8CacheLayout::kQuantBlock);
    for (int64_t i = 0; i < kD; ++i) v[r * kD + i] = float_to_bf16(row[i]);
  }
  return v;
}

// The rows as packed attention entries (kv/packed_entries.h), row r in entry r of pages of
// page_rows entries (0xFF bytes past the last row).
std::vector<uint8_t> packed_entries(const std::vector<uint16_t>& rows, int64_t page_rows) {
  const int64_t n = static_cast<int64_t>(rows.size()) / kD, pages = (n + page_rows - 1) / page_rows;
  const Fp8CacheLayout layout{static_cast<int>(page_rows)};
  std::vector<uint8_t> bytes(static_cast<size_t>(pages * layout.page_bytes()), 0xFF);
  std::vector<float> row(kD);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < kD; ++i) row[i] = bf16_to_float(rows[r * kD + i]);
    encode_fp8_entry(row.data(), layout, r, bytes.data());
  }
  return bytes;
}

TEST_P(SparseAttnWgmmaTest, GivesTheMmaSyncBits) {
  DSV4_SKIP_WITHOUT_GPU();
  const WgmmaCase c = GetParam();
  constexpr int64_t d = kernels::kSparseAttnMmaHeadDim, W = 128, k = 512, kPageRows = 64;
  const int64_t T = c.tokens, H = c.heads;
  std::mt19937 rng(7);
  DeviceBuffer<uint16_t> q(T * H * d), kv(T * d), window(W * d), out(T * H * d);
  q.upload(random_bf16(q.size(), 2.0f, rng));
  const std::vector<uint16_t> kv_rows = random_entry_rows(T, rng), window_rows = random_entry_rows(W, rng);
  kv.upload(kv_rows);
  window.upload(window_rows);
  // The compressed pool in pages listed backwards, the third page missing (-1).
  const int64_t visible = c.ratio > 0 ? (c.start_pos + T) / c.ratio : 0;
  const int64_t pages = visible / kPageRows + 1;
  DeviceBuffer<uint16_t> pool(pages * kPageRows * d);
  const std::vector<uint16_t> pool_rows = random_entry_rows(pages * kPageRows, rng);
  pool.upload(pool_rows);
  std::vector<int32_t> page_ids(static_cast<size_t>(pages));
  for (int64_t i = 0; i < pages; ++i) page_ids[i] = static_cast<int32_t>(pages - 1 - i);
  if (pages > 2) page_ids[2] = -1;
  DeviceBuffer<int32_t> page_table(pages);
  page_table.upload(page_ids);

  kernels::SparseAttnSeq seq;
  seq.token_begin = 0;
  seq.window = {window.get(), true};
  seq.window_rows = W;
  seq.compressed = {pool.get(), true};
  seq.compressed_pages = {page_table.get(), pages, kPageRows, pages};
  DeviceBuffer<kernels::SparseAttnSeq> seqs(1);
  seqs.upload({seq});
  // The same caches and batch rows as packed entries (the batch's rows in one page of an even count).
  const int64_t kv_page_rows = T + T % 2;
  std::vector<uint16_t> kv_padded = kv_rows;
  kv_padded.resize(static_cast<size_t>(kv_page_rows * d), 0);
  const std::vector<uint8_t> kv_bytes = packed_entries(kv_padded, kv_page_rows),
                             window_bytes = packed_entries(window_rows, W),
                             pool_bytes = packed_entries(pool_rows, kPageRows);
  DeviceBuffer<uint8_t> kv_packed(kv_bytes.size()), window_packed(window_bytes.size()), pool_packed(pool_bytes.size());
  kv_packed.upload(kv_bytes);
  window_packed.upload(window_bytes);
  pool_packed.upload(pool_bytes);
  kernels::SparseAttnSeq packed_seq = seq;
  packed_seq.window = {window_packed.get(), false};
  packed_seq.compressed = {pool_packed.get(), false};
  DeviceBuffer<kernels::SparseAttnSeq> packed_seqs(1);
  packed_seqs.upload({packed_seq});
  DeviceBuffer<int32_t> seq_of_token(T), positions(T);
  seq_of_token.upload(std::vector<int32_t>(static_cast<size_t>(T), 0));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(c.start_pos));
  positions.upload(pos);
  // Top-k lists: visible ids, -1 and ids not yet visible.
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    std::uniform_int_distribution<int32_t> id(-1, static_cast<int32_t>((pos[t] + 1) / 4 + 8));
    for (int64_t j = 0; j < k; ++j) ids[t * k + j] = id(rng);
  }
  DeviceBuffer<int32_t> topk(T * k);
  topk.upload(ids);
  std::vector<float> sink_values(static_cast<size_t>(H));
  std::normal_distribution<float> sink_dist(0.0f, 1.0f);
  for (float& v : sink_values) v = sink_dist(rng);
  DeviceBuffer<float> sink(H);
  sink.upload(sink_values);

  kernels::SparseAttnRowsParams p;
  p.q = {q.get(), true};
  p.kv = {kv.get(), true};
  p.seqs = seqs.get();
  p.seq_of_token = seq_of_token.get();
  p.positions = positions.get();
  p.topk = c.ratio == 4 ? topk.get() : nullptr;
  p.sink = {sink.get(), false};
  p.out = {out.get(), true};
  p.tokens = T;
  p.heads = H;
  p.d = d;
  p.window_size = W;
  p.ratio = c.ratio;
  p.k = k;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t last = c.start_pos + T - 1;
  const int64_t max_entries = std::min(W, last + 1) + (c.ratio == 4 ? k : c.ratio > 0 ? (last + 1) / c.ratio : 0);
  kernels::SparseAttnMmaPlan plan =
      kernels::sparse_attn_mma_plan(T, H, max_entries, kernels::current_device_sm_count());
  DeviceBuffer<uint8_t> workspace(plan.workspace_bytes);

  kernels::SparseAttnRowsParams packed_p = p;
  packed_p.packed = true;
  packed_p.kv = {kv_packed.get(), false};
  packed_p.kv_page_rows = kv_page_rows;
  packed_p.seqs = packed_seqs.get();

  using Splits = kernels::SparseAttnMmaPlan::Splits;
  const auto run = [&](bool packed, bool wgmma, Splits splits, int pairs = 4, int dim_parts = 1,
                       bool whole_tiles = false) {
    plan.wgmma = wgmma;
    plan.splits = splits;
    plan.whole_tiles = whole_tiles;
    plan.pairs = pairs;
    plan.dim_parts = dim_parts;
    out.poison();
    kernels::sparse_attn_mma(packed ? packed_p : p, plan, workspace.get(), nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    return out.download();
  };
  const std::vector<uint16_t> mma = run(false, false, Splits::kMergeKernel);
  int64_t nonzero = 0;
  for (const uint16_t v : mma) nonzero += (v & 0x7fff) != 0;
  EXPECT_GT(nonzero, static_cast<int64_t>(mma.size()) / 2) << c.name;
  const auto expect_mma_bits = [&](const std::vector<uint16_t>& got, const std::string& what) {
    int64_t differ = 0;
    for (size_t i = 0; i < mma.size(); ++i) differ += got[i] != mma[i];
    EXPECT_EQ(differ, 0) << c.name << " (" << what << "): of " << mma.size() << " values, first at "
                         << std::distance(mma.begin(), std::mismatch(mma.begin(), mma.end(), got.begin()).first);
  };
  for (const bool packed : {false, true}) {
    const std::string entries = packed ? "packed entries, " : "rows, ";
    if (packed) expect_mma_bits(run(true, false, Splits::kMergeKernel), entries + "mma.sync");
    for (const Splits splits : {Splits::kMergeKernel, Splits::kLastCtaMerges, Splits::kCtaPerToken})
      expect_mma_bits(run(packed, true, splits), entries + "WGMMA, splits schedule " + std::to_string(static_cast<int>(splits)));
    // A warpgroup a whole tile (sparse_attn_wgmma_ws over rows; packed entries keep the kernel above).
    expect_mma_bits(run(packed, true, Splits::kCtaPerToken, 4, 1, true), entries + "WGMMA, a CTA a token, whole tiles");
    for (const int pairs : {1, 2})
      for (const int dim_parts : {1, 2, 4})
        expect_mma_bits(run(packed, false, Splits::kMergeKernel, pairs, dim_parts),
                        entries + std::to_string(16 * pairs) + " heads a CTA, " + std::to_string(dim_parts) + " dim parts");
  }
}

// The plan is host arithmetic (no GPU needed): decode launches spread a token over CTAs, mid-sized
// ones merge in their last CTA, prefill-sized ones run a token's splits in one CTA, in launches of
// whole waves where the splits' scratch bounds them.
TEST(SparseAttnMmaPlan, PicksTheSplitScheduleByTheLaunchsWaves) {
  using Splits = kernels::SparseAttnMmaPlan::Splits;
  constexpr int kSms = 132;
  constexpr int64_t kCsaEntries = 128 + 512, kWindowEntries = 128;

  const kernels::SparseAttnMmaPlan decode = kernels::sparse_attn_mma_plan(1, 64, kCsaEntries, kSms);
  EXPECT_EQ(decode.max_splits, 5);
  EXPECT_EQ(decode.pairs, 1);
  EXPECT_EQ(decode.dim_parts, 4);
  EXPECT_EQ(decode.splits, Splits::kMergeKernel);

  const kernels::SparseAttnMmaPlan batch64 = kernels::sparse_attn_mma_plan(64, 64, kCsaEntries, kSms);
  EXPECT_EQ(batch64.pairs, 4);
  EXPECT_EQ(batch64.splits, Splits::kMergeKernel);  // 320 CTAs: under 8 waves

  const kernels::SparseAttnMmaPlan mid = kernels::sparse_attn_mma_plan(300, 64, kCsaEntries, kSms);
  EXPECT_EQ(mid.splits, Splits::kLastCtaMerges);  // 1,500 CTAs a split each, 300 tokens under 4 waves
  EXPECT_EQ(mid.tokens_per_launch, 300);

  const kernels::SparseAttnMmaPlan chunk = kernels::sparse_attn_mma_plan(600, 64, kCsaEntries, kSms);
  EXPECT_EQ(chunk.splits, Splits::kCtaPerToken);
  EXPECT_EQ(chunk.tokens_per_launch, 600);  // one launch: not cut to whole waves

  for (const int64_t heads : {64, 128}) {
    const kernels::SparseAttnMmaPlan prefill = kernels::sparse_attn_mma_plan(8192, heads, kCsaEntries, kSms);
    const int64_t head_blocks = heads / 64;
    EXPECT_EQ(prefill.splits, Splits::kCtaPerToken) << heads << " heads";
    EXPECT_TRUE(prefill.whole_tiles) << heads << " heads";  // CSA's 5 splits a token
    EXPECT_LT(prefill.tokens_per_launch, 8192) << heads << " heads";  // the scratch bounds it
    EXPECT_EQ(prefill.tokens_per_launch * head_blocks % kSms, 0) << heads << " heads: launches of whole waves";
    EXPECT_GE(prefill.tokens_per_launch * head_blocks, 4 * kSms) << heads << " heads";
    EXPECT_LE(prefill.workspace_bytes, size_t{512} << 20) << heads << " heads";
  }

  const kernels::SparseAttnMmaPlan hca = kernels::sparse_attn_mma_plan(8192, 64, kWindowEntries + 8192 / 128, kSms);
  EXPECT_EQ(hca.max_splits, 2);
  EXPECT_EQ(hca.splits, Splits::kCtaPerToken);
  EXPECT_FALSE(hca.whole_tiles);  // two splits a token: the half-tile warpgroups are faster

  const kernels::SparseAttnMmaPlan window = kernels::sparse_attn_mma_plan(8192, 64, kWindowEntries, kSms);
  EXPECT_EQ(window.max_splits, 1);
  EXPECT_EQ(window.splits, Splits::kMergeKernel);  // nothing to merge
  EXPECT_EQ(window.workspace_bytes, 0u);
  EXPECT_EQ(window.tokens_per_launch, 8192);
}

INSTANTIATE_TEST_SUITE_P(Cases, SparseAttnWgmmaTest,
                         ::testing::Values(WgmmaCase{"CsaDeep", 64, 4, 96, 3000}, WgmmaCase{"CsaFirst", 64, 4, 80, 0},
                                           WgmmaCase{"HcaProHeads", 128, 128, 40, 8000},
                                           WgmmaCase{"SwaPartialHeads", 40, 0, 72, 50},
                                           WgmmaCase{"CsaDecodeOneToken", 64, 4, 1, 8191}),
                         [](const ::testing::TestParamInfo<WgmmaCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dsv4
