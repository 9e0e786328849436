// StepPlan, the i32 inputs a forward uploads once: where each token's kv row goes in its window
// ring, each compressor block row's cache entry and position per ratio (the rows of blocks a slice
// does not complete write nothing), the sequences' block tables into the cache pool, in the layout
// the ops read; and its checks of the batch, each naming the sequence (an exhausted pool too).
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "config/presets.h"
#include "core/error.h"
#include "model/step_plan.h"

namespace dsv4 {
namespace {

class StepPlanTest : public ::testing::Test {
 protected:
  std::vector<int32_t> field(const StepPlan& plan, StepPlan::Field f) {
    return {plan.ints().begin() + f.offset, plan.ints().begin() + f.offset + f.size};
  }
  // A cache that has seen `length` tokens.
  SequenceCache cache_at(int64_t length, int64_t capacity = 512) {
    SequenceCache c(ops_, cfg_, capacity, DType::kBF16);
    c.advance(length);
    return c;
  }
  cpu::CpuOps ops_{1};
  const ModelConfig cfg_ = preset_config("tiny");
};

TEST_F(StepPlanTest, WindowRowsAndEntryRowsFollowThePositions) {
  const int64_t W = cfg_.params().sliding_window;
  ASSERT_EQ(W, 128);
  SequenceCache a = cache_at(5), b = cache_at(0);
  ForwardBatch batch;
  const std::vector<int32_t> three = {1, 2, 3};
  std::vector<int32_t> many(130);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>(i + 10);
  batch.add(a, three);  // positions 5..7
  batch.add(b, many);   // positions 0..129
  const StepPlan plan(cfg_, batch, false);
  ASSERT_EQ(plan.num_tokens(), 133);
  EXPECT_EQ(field(plan, plan.token_ids()), [&] {
    std::vector<int32_t> ids = three;
    ids.insert(ids.end(), many.begin(), many.end());
    return ids;
  }());

  // Window rows: position % W, except b's first two tokens, which b's last 128 overwrite.
  const std::vector<int32_t> rows = field(plan, plan.window_rows());
  EXPECT_EQ(std::vector<int32_t>(rows.begin(), rows.begin() + 3), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(rows[3], -1);
  EXPECT_EQ(rows[4], -1);
  for (int64_t i = 2; i < 130; ++i) EXPECT_EQ(rows[static_cast<size_t>(3 + i)], i % W) << "b's token " << i;

  // Ratio 4: a's one block row completes block 1 (positions 4..7); b's 33 rows are blocks 0..31
  // and an incomplete 32.
  const std::vector<int32_t> r4 = field(plan, plan.entry_rows(4)), p4 = field(plan, plan.entry_positions(4));
  ASSERT_EQ(r4.size(), 1u + 33u);
  EXPECT_EQ(r4[0], 1);
  EXPECT_EQ(p4[0], 4);
  for (int32_t j = 0; j < 32; ++j) {
    EXPECT_EQ(r4[static_cast<size_t>(1 + j)], j);
    EXPECT_EQ(p4[static_cast<size_t>(1 + j)], 4 * j);
  }
  EXPECT_EQ(r4[33], -1);
  // Ratio 128: a completes nothing; b completes block 0, not block 1.
  EXPECT_EQ(field(plan, plan.entry_rows(128)), (std::vector<int32_t>{-1, 0, -1}));
  EXPECT_EQ(field(plan, plan.entry_positions(128)), (std::vector<int32_t>{0, 0, 0}));
}

// A decode step's plan has the same layout at every position: one block row per sequence and
// ratio, so a captured graph's ops read the same places at the next step.
TEST_F(StepPlanTest, ADecodeStepsLayoutDoesNotDependOnThePosition) {
  std::vector<size_t> sizes;
  for (int64_t length : {0, 3, 127, 128, 300}) {
    SequenceCache c = cache_at(length);
    ForwardBatch batch;
    const std::vector<int32_t> one = {7};
    batch.add(c, one);
    const StepPlan plan(cfg_, batch, false);
    sizes.push_back(plan.ints().size());
    EXPECT_EQ(plan.entry_rows(4).size, 1);
    EXPECT_EQ(plan.entry_rows(128).size, 1);
    EXPECT_EQ(field(plan, plan.entry_rows(4))[0], (length + 1) % 4 == 0 ? length / 4 : -1) << "length " << length;
    EXPECT_EQ(field(plan, plan.entry_rows(128))[0], (length + 1) % 128 == 0 ? length / 128 : -1) << "length " << length;
  }
  for (size_t s : sizes) EXPECT_EQ(s, sizes.front());
}

// Each sequence's block table per ratio is in the plan at the size its capacity needs whatever
// its length (so a decode step's layout does not depend on the position either), with the pages
// the step's tokens complete entries in taken from the pool and -1 for the rest.
TEST_F(StepPlanTest, BlockTablesHaveAFixedSizeAndTakeThePagesTheStepNeeds) {
  // Ratio 4: 64 entries of a 256-token sequence in 16 pages of 4; ratio 128: 2 entries, 1 page.
  const auto pool = std::make_shared<CachePool>(ops_, cfg_, DType::kBF16, CachePool::pages_for(cfg_, 2, 256, 4));
  ASSERT_EQ(pool->pages(4).num_pages, 32);
  ASSERT_EQ(pool->pages(128).num_pages, 2);
  SequenceCache a(ops_, cfg_, pool, 256), b(ops_, cfg_, pool, 100);
  const std::vector<int32_t> twenty(20, 5), nine(9, 6), one = {7};
  ForwardBatch first;
  first.add(a, twenty);  // entries 0-4 of ratio 4: pages for 2 x 4 rows
  first.add(b, nine);    // entries 0-1: one page
  const StepPlan plan(cfg_, first, false);
  std::vector<int32_t> table_a(16, -1), table_b(7, -1);
  table_a[0] = 0;
  table_a[1] = 1;
  table_b[0] = 2;
  EXPECT_EQ(field(plan, plan.block_table(4, 0)), table_a);
  EXPECT_EQ(field(plan, plan.block_table(4, 1)), table_b);
  EXPECT_EQ(field(plan, plan.block_table(128, 0)), (std::vector<int32_t>{-1}));
  EXPECT_EQ(plan.block_table(128, 1).size, 0);  // 100 tokens complete no ratio-128 entry
  EXPECT_EQ(field(plan, plan.one_page_table()), (std::vector<int32_t>{0}));
  EXPECT_EQ(pool->free_pages(4), 29);
  EXPECT_EQ(a.block_table(4), table_a);

  a.advance(20);
  b.advance(9);
  ForwardBatch decode;
  decode.add(a, one);
  decode.add(b, one);
  const StepPlan next(cfg_, decode, false);
  EXPECT_EQ(next.block_table(4, 0).size, 16);
  EXPECT_EQ(field(next, next.block_table(4, 1)), table_b);  // position 9 completes no entry
}

// With table_positions (a recorded step's positions bound) the tables cover the pages of those
// positions only, whatever the capacity, and a batch reaching past it is refused.
TEST_F(StepPlanTest, TablePositionsCutTheBlockTablesToThePagesOfThosePositions) {
  const auto pool = std::make_shared<CachePool>(ops_, cfg_, DType::kBF16, CachePool::pages_for(cfg_, 1, 1024, 4));
  SequenceCache a(ops_, cfg_, pool, 1024);
  a.advance(100);
  const std::vector<int32_t> one = {7};
  ForwardBatch decode;
  decode.add(a, one);
  EXPECT_EQ(StepPlan(cfg_, decode, false).block_table(4, 0).size, 64);  // 256 entries of 1024 tokens
  decode.table_positions = 200;
  const StepPlan bounded(cfg_, decode, false);
  EXPECT_EQ(bounded.block_table(4, 0).size, 13);  // 50 entries in pages of 4
  EXPECT_EQ(bounded.block_table(128, 0).size, 1);
  decode.table_positions = 100;
  try {
    StepPlan refused(cfg_, decode, false);
    FAIL() << "a token at position 100 with table_positions 100";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("table_positions"), std::string::npos) << e.what();
  }
}

// Pages go back to the pool when a sequence ends (not when it is moved), and a step that needs
// more pages than are free is refused naming the sequence and the counts.
TEST_F(StepPlanTest, PagesReturnWhenASequenceEndsAndAnExhaustedPoolIsNamed) {
  const auto pool = std::make_shared<CachePool>(ops_, cfg_, DType::kBF16, CachePool::pages_for(cfg_, 1, 64, 4));
  ASSERT_EQ(pool->free_pages(4), 4);
  const std::vector<int32_t> tokens(64, 3);
  {
    SequenceCache c(ops_, cfg_, pool, 64);
    ForwardBatch batch;
    batch.add(c, std::span(tokens).first(32));
    const StepPlan plan(cfg_, batch, false);
    EXPECT_EQ(pool->free_pages(4), 2);
    c.advance(32);
    SequenceCache moved = std::move(c);
    EXPECT_EQ(pool->free_pages(4), 2);
    SequenceCache d(ops_, cfg_, pool, 64);
    ForwardBatch too_many;
    too_many.add(moved, std::span(tokens).first(8));  // a third page
    too_many.add(d, tokens);                           // four more
    try {
      const StepPlan refused(cfg_, too_many, false);
      ADD_FAILURE() << "a step beyond the pool was planned";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "sequence 1 of the batch: the cache pool is out of ratio-4 pages: 4 needed, 1 of 4 pages of 4 rows free"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(pool->free_pages(4), 4);
}

TEST_F(StepPlanTest, RefusesABatchThatDoesNotMatchItsCaches) {
  const auto expect_refused = [&](const ForwardBatch& batch, const std::string& says) {
    try {
      const StepPlan plan(cfg_, batch, false);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  SequenceCache a = cache_at(5, 8), b = cache_at(0);
  const std::vector<int32_t> three = {1, 2, 3}, four = {1, 2, 3, 4};
  ForwardBatch wrong_start;
  wrong_start.add(a, three, 4);
  expect_refused(wrong_start, "sequence 0 of the batch starts at position 4 but its cache holds 5 tokens");
  ForwardBatch too_long;
  too_long.add(a, four);
  expect_refused(too_long, "sequence 0 of the batch would grow to 9 tokens, beyond its capacity of 8");
  ForwardBatch twice;
  twice.add(b, three);
  twice.sequences.push_back(twice.sequences.front());
  twice.token_ids.insert(twice.token_ids.end(), three.begin(), three.end());
  twice.positions.insert(twice.positions.end(), {0, 1, 2});
  expect_refused(twice, "sequence 1 of the batch appears twice");
  ForwardBatch empty;
  expect_refused(empty, "a forward needs at least one token");
}

}  // namespace
}  // namespace dsv4
