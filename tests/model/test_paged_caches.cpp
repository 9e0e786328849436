// Paged caches on the tiny checkpoint: sequences whose compressed entries and indexer keys live in
// small pages of one shared pool, taken as they grow, interleaved with each other's and reused
// after another sequence ends, give bit for bit the logits and cache contents of sequences with
// one page each (the contiguous layout), through chunked prefill, batched prefill and decode, and
// so do caches of packed fp8 entries (kv/packed_entries.h) beside bf16 rows.
// Pages named by cache blocks let a sequence resume on another's prefix (prefix caching). Plans
// whose tables stop at a positions bound give the whole tables' bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model_test_util.h"

namespace dsv4::testing {
namespace {

struct PagedCase {
  int64_t page_rows;
  bool exact;
  bool fp8 = false;  // the paged caches pack their entries (the contiguous ones keep bf16 rows)
};

class PagedCaches : public CpuTinyModelSuite<::testing::TestWithParam<PagedCase>> {};

// One sequence's next tokens in a step.
struct Chunk {
  size_t seq;
  int64_t tokens;
};

// Sequence s's entries [0, entries) of a paged cache `pool` ([pages, page_rows, width] rows or
// packed entries) in entry order as floats, read through its block table.
std::vector<float> entries_of(const DeviceTensor& pool, const std::vector<int32_t>& table, int64_t entries) {
  const std::vector<float> all = cache_floats(pool.view());
  const int64_t page_rows = pool.dim(1), width = unpacked_width(pool.dtype(), pool.dim(2));
  std::vector<float> out;
  for (int64_t j = 0; j < entries; ++j) {
    const int32_t page = table.at(static_cast<size_t>(j / page_rows));
    EXPECT_GE(page, 0) << "entry " << j << " has no page";
    if (page < 0) return out;
    const auto row = all.begin() + (page * page_rows + j % page_rows) * width;
    out.insert(out.end(), row, row + width);
  }
  return out;
}

TEST_P(PagedCaches, SmallSharedPagesGiveTheContiguousLayoutsBits) {
  const PagedCase c = GetParam();
  const Model& model = *model_;
  Ops& ops = *ops_;
  const ModelConfig& cfg = model.config();
  const int64_t V = cfg->vocab_size;
  // Sequences 0-2 are compared; 3 is a filler that takes pages between theirs and ends after the
  // second step, so later pages come back from it in another order.
  const std::vector<int64_t> capacity = {420, 200, 150, 100};
  std::vector<std::vector<int32_t>> ids;
  for (size_t s = 0; s < capacity.size(); ++s) ids.push_back(test_ids(capacity[s], V, static_cast<uint32_t>(20 + s)));
  const std::vector<std::vector<Chunk>> steps = [] {
    std::vector<std::vector<Chunk>> v = {{{3, 48}, {0, 100}}, {{1, 70}, {0, 60}, {3, 20}}, {{0, 230}, {2, 50}, {1, 30}}};
    for (int i = 0; i < 30; ++i) v.push_back({{0, 1}, {2, 1}, {1, 1}});  // decode, across C4 and C128 boundaries
    return v;
  }();
  const int64_t filler_ends_after = 2;

  const std::shared_ptr<CachePool> pool = model.new_cache_pool(
      ops, CachePool::pages_for(cfg, 4, capacity[0], c.page_rows), c.fp8 ? DType::kF8E4M3 : forward_cache_dtype(c.exact));
  std::vector<std::optional<SequenceCache>> paged, contiguous;
  for (const int64_t cap : capacity) {
    paged.emplace_back(model.new_sequence(ops, pool, cap));
    contiguous.emplace_back(model.new_sequence(ops, cap, c.exact));
  }
  std::vector<int64_t> done(capacity.size(), 0);
  for (size_t step = 0; step < steps.size(); ++step) {
    if (step == filler_ends_after) {
      paged[3].reset();
      contiguous[3].reset();
    }
    // Every token's final hidden row and each sequence's last logits.
    const auto run = [&](std::vector<std::optional<SequenceCache>>& caches) {
      ForwardBatch batch;
      batch.options.exact_math = c.exact;
      batch.options.logits = LogitsFor::kLastTokenOfSequence;
      for (const Chunk& ch : steps[step])
        batch.add(*caches[ch.seq], std::span(ids[ch.seq]).subspan(static_cast<size_t>(done[ch.seq]),
                                                                  static_cast<size_t>(ch.tokens)));
      const ForwardResult r = model.forward(ops, batch);
      std::vector<float> out = to_floats(r.final_hidden.view());
      const std::vector<float> logits = to_floats(r.logits.view());
      out.insert(out.end(), logits.begin(), logits.end());
      return out;
    };
    const std::vector<float> got = run(paged), want = run(contiguous);
    ASSERT_TRUE(same_bits(got, want)) << "step " << step;
    for (const Chunk& ch : steps[step]) done[ch.seq] += ch.tokens;
  }

  // The pages really are shuffled: sequence 0's ratio-4 pages interleave with sequence 1's and
  // go back to pages the filler gave back (page 0 was the filler's first).
  const std::vector<int32_t>& t0 = paged[0]->block_table(4);
  EXPECT_FALSE(std::is_sorted(t0.begin(), t0.end()));
  EXPECT_NE(std::find(t0.begin(), t0.end(), 0), t0.end());
  EXPECT_GT(paged[1]->block_table(4).front(), t0.front());

  // Every entry of every compressed cache and indexer-key cache, and the fixed-size state.
  for (size_t s = 0; s < 3; ++s) {
    const SequenceCache &p = *paged[s], &q = *contiguous[s];
    for (int64_t l = 0; l < cfg.num_layers(); ++l) {
      const std::string where = "sequence " + std::to_string(s) + " layer " + std::to_string(l);
      const int64_t m = cfg.compress_ratio(l);
      EXPECT_TRUE(same_bits(cache_floats(p.layer(l).window.view()), cache_floats(q.layer(l).window.view()))) << where;
      if (m == 0) continue;
      const int64_t entries = p.length() / m;
      EXPECT_TRUE(same_bits(entries_of(p.pool().compressed(l), p.block_table(m), entries),
                            entries_of(q.pool().compressed(l), q.block_table(m), entries)))
          << where << " compressed";
      EXPECT_TRUE(same_bits(to_floats(p.layer(l).compressor.kv.view()), to_floats(q.layer(l).compressor.kv.view())))
          << where;
      if (cfg.layer_kind(l) != LayerKind::kCsa) continue;
      EXPECT_TRUE(same_bits(entries_of(p.pool().index_keys(l), p.block_table(m), entries),
                            entries_of(q.pool().index_keys(l), q.block_table(m), entries)))
          << where << " indexer keys";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PageRows, PagedCaches,
                         ::testing::Values(PagedCase{2, false}, PagedCase{3, true}, PagedCase{5, false, true}),
                         [](const ::testing::TestParamInfo<PagedCase>& info) {
                           return "rows" + std::to_string(info.param.page_rows) + (info.param.exact ? "_exact" : "") +
                                  (info.param.fp8 ? "_fp8" : "");
                         });

// Prefix caching at the model's level: a sequence B whose pages for the first P tokens are those
// sequence A filled, resumed at P - prefix_recompute_tokens, gives A's logits and states bit for
// bit from P on, and leaves A's entries as they were. One token less of recomputation changes the
// numbers, so the bound is the least that works (the rings start from zeros, not from A's rows).
class ResumedPrefix : public CpuTinyModelSuite<::testing::TestWithParam<bool>> {};

TEST_P(ResumedPrefix, GivesTheWholePrefixsBitsAndTheBoundIsTight) {
  const bool exact = GetParam();
  const Model& model = *model_;
  Ops& ops = *ops_;
  const ModelConfig& cfg = model.config();
  const int64_t block = 64, prefix = 640, total = prefix + 1, decode = 3;  // logits from position P on
  const int64_t recompute = prefix_recompute_tokens(cfg);
  ASSERT_EQ(recompute, 3 * 127 + 127);  // tiny: 4 layers, W = 128; the last is CSA (8 state rows)
  const std::vector<int32_t> ids = test_ids(total + decode, cfg->vocab_size, 7);

  CachePool::PagesByRatio pages;
  for (const int64_t m : {4, 128}) pages[m] = {std::max<int64_t>(1, block / m), 40};
  const std::shared_ptr<CachePool> pool = model.new_cache_pool(ops, pages, forward_cache_dtype(exact));
  std::vector<int32_t> blocks_a, blocks_b;
  for (int32_t b = 0; b < 12; ++b) blocks_a.push_back(b);
  for (int32_t b = 0; b < 12; ++b) blocks_b.push_back(b < prefix / block ? b : 20 + b);

  // The logits of the chunk's last token, then of `decode` single tokens.
  const auto run = [&](SequenceCache& cache, int64_t from) {
    std::vector<float> out;
    const auto step = [&](int64_t begin, int64_t end) {
      ForwardBatch batch;
      batch.options.exact_math = exact;
      batch.options.logits = LogitsFor::kLastTokenOfSequence;
      batch.add(cache, std::span(ids).subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin)));
      const std::vector<float> logits = to_floats(model.forward(ops, batch).logits.view());
      out.insert(out.end(), logits.begin(), logits.end());
    };
    step(from, total);
    for (int64_t i = 0; i < decode; ++i) step(total + i, total + i + 1);
    return out;
  };
  const auto prefix_entries = [&](const SequenceCache& c) {
    std::vector<float> all;
    for (int64_t l = 0; l < cfg.num_layers(); ++l)
      if (const int64_t m = cfg.compress_ratio(l); m > 0) {
        const std::vector<float> e = entries_of(c.pool().compressed(l), c.block_table(m), prefix / m);
        all.insert(all.end(), e.begin(), e.end());
      }
    return all;
  };

  SequenceCache a = model.new_sequence(ops, pool, total + decode, PageNaming::kNamedByBlocks);
  a.name_pages(blocks_a, block);
  const std::vector<float> want = run(a, 0);
  const std::vector<float> entries_before = prefix_entries(a);

  const auto resumed = [&](int64_t recomputed) {
    SequenceCache b = model.new_sequence(ops, pool, total + decode, PageNaming::kNamedByBlocks);
    b.name_pages(blocks_b, block);
    b.resume_on_prefix(prefix - recomputed, prefix);
    std::vector<float> got = run(b, prefix - recomputed);
    for (int64_t l = 0; l < cfg.num_layers(); ++l) {
      if (!same_bits(to_floats(b.layer(l).window.view()), to_floats(a.layer(l).window.view()))) got.clear();
      if (cfg.compress_ratio(l) > 0 &&
          !same_bits(to_floats(b.layer(l).compressor.kv.view()), to_floats(a.layer(l).compressor.kv.view())))
        got.clear();
    }
    return got;
  };
  EXPECT_TRUE(same_bits(resumed(recompute), want)) << "resumed with " << recompute << " tokens recomputed";
  EXPECT_TRUE(same_bits(prefix_entries(a), entries_before)) << "the shared prefix's entries were rewritten";
  EXPECT_FALSE(same_bits(resumed(recompute - 1), want)) << "one token less of recomputation";

  // A state snapshot at the prefix's end (another sequence's, stopped there) lets B resume at P
  // itself, recomputing nothing.
  const std::shared_ptr<CachePool> other_pool = model.new_cache_pool(ops, pages, forward_cache_dtype(exact));
  SequenceCache c = model.new_sequence(ops, other_pool, total + decode, PageNaming::kNamedByBlocks);
  c.name_pages(blocks_a, block);
  ForwardBatch to_prefix;
  to_prefix.options.exact_math = exact;
  to_prefix.add(c, std::span(ids).first(static_cast<size_t>(prefix)));
  model.forward(ops, to_prefix);
  const StateSnapshot snap = c.snapshot(ops);
  EXPECT_EQ(snap.position, prefix);
  EXPECT_GT(snap.bytes(), 0);
  EXPECT_EQ(snap.bytes(), SequenceCache::snapshot_bytes(model.config(), exact ? DType::kF32 : DType::kBF16));
  SequenceCache d = model.new_sequence(ops, pool, total + decode, PageNaming::kNamedByBlocks);
  d.name_pages(blocks_b, block);
  d.resume_on_snapshot(ops, snap);
  EXPECT_TRUE(same_bits(run(d, prefix), want)) << "resumed on a snapshot";
  EXPECT_THROW(d.snapshot(ops), UsageError);  // length 644: not a multiple of 128
}

INSTANTIATE_TEST_SUITE_P(Modes, ResumedPrefix, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "exact" : "default"; });

class NamedPages : public CpuTinyModelSuite<::testing::Test> {};

// The KV canary (CachePool::poison): poisoned pages nobody reads change nothing; poisoning a page
// a sequence has written makes its next logits NaN, so a read of a poisoned row cannot go unseen.
TEST_F(NamedPages, PoisonedPagesShowWhenRead) {
  const Model& model = *model_;
  Ops& ops = *ops_;
  CachePool::PagesByRatio pages;
  for (const int64_t m : {4, 128}) pages[m] = {std::max<int64_t>(1, 64 / m), 8};
  const std::vector<int32_t> ids = test_ids(140, model.config()->vocab_size, 3);
  const auto logits_after_poison = [&](const std::vector<int32_t>& poisoned) {
    const std::shared_ptr<CachePool> pool = model.new_cache_pool(ops, pages, DType::kBF16);
    SequenceCache cache = model.new_sequence(ops, pool, 200, PageNaming::kNamedByBlocks);
    cache.name_pages(std::vector<int32_t>{2, 3, 4}, 64);
    for (const auto& [m, p] : pages) pool->poison(ops, m, std::vector<int32_t>{0, 5, 7});
    ForwardBatch prefill;
    prefill.add(cache, std::span(ids).first(139));
    model.forward(ops, prefill);
    for (const auto& [m, p] : pages) pool->poison(ops, m, poisoned);
    ForwardBatch step;
    step.options.logits = LogitsFor::kLastTokenOfSequence;
    step.add(cache, std::span(ids).subspan(139, 1));
    return to_floats(model.forward(ops, step).logits.view());
  };
  const std::vector<float> clean = logits_after_poison({});
  EXPECT_TRUE(std::all_of(clean.begin(), clean.end(), [](float x) { return std::isfinite(x); }));
  EXPECT_TRUE(same_bits(logits_after_poison({1, 6}), clean));
  const std::vector<float> read = logits_after_poison({2});
  EXPECT_TRUE(std::any_of(read.begin(), read.end(), [](float x) { return std::isnan(x); }));
}

// Decode steps whose plans carry only the pages of positions below a bound (what a recorded step
// passes: ForwardBatch::table_positions) give the bits of plans with the whole tables.
TEST_F(NamedPages, TablesCutToAPositionsBoundGiveTheWholeTablesBits) {
  const Model& model = *model_;
  Ops& ops = *ops_;
  const int64_t capacity = 2000;
  const std::shared_ptr<CachePool> pool =
      model.new_cache_pool(ops, CachePool::pages_for(model.config(), 2, capacity, 4), DType::kBF16);
  const std::vector<int32_t> ids = test_ids(310, model.config()->vocab_size, 8);
  const auto decode = [&](int64_t table_positions) {
    SequenceCache cache = model.new_sequence(ops, pool, capacity);
    ForwardBatch prefill;
    prefill.add(cache, std::span(ids).first(300));
    model.forward(ops, prefill);
    std::vector<float> out;
    for (size_t i = 300; i < ids.size(); ++i) {
      ForwardBatch step;
      step.options.logits = LogitsFor::kLastTokenOfSequence;
      step.table_positions = table_positions;
      step.add(cache, std::span(ids).subspan(i, 1));
      const std::vector<float> logits = to_floats(model.forward(ops, step).logits.view());
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  };
  EXPECT_TRUE(same_bits(decode(512), decode(0)));
}

TEST_F(NamedPages, MisuseIsANamedUsageError) {
  const Model& model = *model_;
  Ops& ops = *ops_;
  CachePool::PagesByRatio pages;
  for (const int64_t m : {4, 128}) pages[m] = {std::max<int64_t>(1, 64 / m), 8};
  const std::shared_ptr<CachePool> pool = model.new_cache_pool(ops, pages, DType::kBF16);
  const auto refuses = [](const auto& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one saying \"" << words << "\"";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  SequenceCache own = model.new_sequence(ops, 300, false);
  refuses([&] { own.resume_on_prefix(0, 128); }, "not named by cache blocks");
  refuses([&] { own.name_pages(std::vector<int32_t>{0}, 64); }, "takes its pages from the pool");

  SequenceCache named = model.new_sequence(ops, pool, 300, PageNaming::kNamedByBlocks);
  refuses([&] { named.name_pages(std::vector<int32_t>{0}, 48); }, "cannot be named by cache blocks of 48 tokens");
  refuses([&] { named.name_pages(std::vector<int32_t>{0, 9}, 64); }, "block 9 is beyond the pool's 8");
  refuses([&] { named.resume_on_prefix(0, 64); }, "multiple of the compression ratio 128");
  refuses([&] { named.resume_on_prefix(200, 128); }, "need 0 <= resume <= prefix");
  named.name_pages(std::vector<int32_t>{3}, 64);  // 64 tokens' pages; 68 tokens make a 17th ratio-4 entry
  ForwardBatch batch;
  const std::vector<int32_t> ids = test_ids(68, model.config()->vocab_size);
  batch.add(named, ids);
  refuses([&] { model.forward(ops, batch); }, "is not named by a cache block yet");
}

}  // namespace
}  // namespace dsv4::testing
