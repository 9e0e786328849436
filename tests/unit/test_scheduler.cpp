// The block manager and the scheduler on their own (no model): block accounting, decode first,
// chunked prefill under the budget, max_num_seqs, refusal of too-long requests, preemption of the
// newest by recompute, and a simulated serving run in which every sequence finishes and every
// block comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "scheduler/scheduler.h"

namespace dsv4 {
namespace {

std::vector<int32_t> prompt(int64_t n) { return std::vector<int32_t>(static_cast<size_t>(n), 7); }

SchedulerConfig config(int64_t budget, int64_t blocks, int64_t block_size = 4, int64_t max_seqs = 8) {
  return SchedulerConfig{/*max_model_len=*/1000, max_seqs, budget, blocks, block_size};
}

// Completes a step as the engine does: the chunks are computed, sampling chunks get a token.
void run(Scheduler& s, const SchedulerStep& step) {
  s.complete(step);
  for (const ScheduledChunk& c : step.chunks)
    if (c.samples()) s.append_token(*c.sequence, 1);
}

std::map<SequenceId, int64_t> chunk_sizes(const SchedulerStep& step) {
  std::map<SequenceId, int64_t> sizes;
  for (const ScheduledChunk& c : step.chunks) sizes[c.sequence->id] = c.num_tokens;
  return sizes;
}

TEST(BlockManager, GrowsReleasesAndCountsReferences) {
  BlockManager m(10, 4);
  BlockTable a;
  EXPECT_EQ(m.blocks_for(9), 3);
  m.grow(a, 9);
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(m.num_free(), 7);
  m.grow(a, 12);  // still 3 blocks
  EXPECT_EQ(m.num_free(), 7);
  BlockTable b = m.share(a);
  EXPECT_EQ(m.ref_count(a.blocks[0]), 2);
  m.release(a);
  EXPECT_EQ(m.num_free(), 7);  // b still holds them
  m.release(b);
  EXPECT_EQ(m.num_free(), 10);
  BlockTable big;
  EXPECT_FALSE(m.can_grow(big, 41));
  EXPECT_THROW(m.grow(big, 41), UsageError);
  EXPECT_THROW(BlockManager(0, 4), UsageError);
}

TEST(Scheduler, ChunksAPromptUnderTheTokenBudgetThenDecodes) {
  Scheduler s(config(8, 100));
  Sequence& q = s.add(prompt(20), 3);
  std::vector<int64_t> chunks;
  for (int i = 0; i < 3; ++i) {
    const SchedulerStep step = s.schedule();
    ASSERT_EQ(step.chunks.size(), 1u);
    chunks.push_back(step.chunks[0].num_tokens);
    EXPECT_EQ(step.chunks[0].samples(), i == 2);
    run(s, step);
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{8, 8, 4}));
  EXPECT_EQ(q.num_output(), 1);
  const SchedulerStep decode = s.schedule();
  ASSERT_EQ(decode.chunks.size(), 1u);
  EXPECT_EQ(decode.chunks[0].num_tokens, 1);
  EXPECT_EQ(decode.chunks[0].start, 20);
}

TEST(Scheduler, DecodesComeFirstAndPrefillGetsTheRest) {
  Scheduler s(config(8, 100));
  Sequence& a = s.add(prompt(3), 10);
  run(s, s.schedule());  // a prefilled, now decoding
  Sequence& b = s.add(prompt(30), 10);
  const SchedulerStep step = s.schedule();
  ASSERT_EQ(step.chunks.size(), 2u);
  EXPECT_EQ(step.chunks[0].sequence, &a);
  EXPECT_EQ(step.chunks[0].num_tokens, 1);
  EXPECT_EQ(step.chunks[1].sequence, &b);
  EXPECT_EQ(step.chunks[1].num_tokens, 7);
}

TEST(Scheduler, RunsAtMostMaxNumSeqs) {
  Scheduler s(config(100, 100, 4, 2));
  for (int i = 0; i < 3; ++i) s.add(prompt(5), 4);
  EXPECT_EQ(s.schedule().chunks.size(), 2u);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(Scheduler, RefusesRequestsLongerThanTheModelWithTheNumbers) {
  Scheduler s(SchedulerConfig{64, 4, 16, 100, 4});
  try {
    s.check_request(60, 10);
    FAIL() << "accepted 70 tokens with max_model_len 64";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("maximum context length is 64"), std::string::npos) << m;
    EXPECT_NE(m.find("60 in the prompt"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(s.check_request(60, 4));
  EXPECT_THROW(s.check_request(0, 4), UsageError);
  EXPECT_THROW(s.add(prompt(65), 1), UsageError);
  // More blocks than the whole cache can never run.
  Scheduler small(SchedulerConfig{1000, 4, 16, 5, 4});
  EXPECT_THROW(small.check_request(18, 4), UsageError);
  EXPECT_THROW(Scheduler(SchedulerConfig{64, 8, 4, 10, 4}), UsageError);  // budget < max_num_seqs
}

TEST(Scheduler, PreemptsTheNewestAndRecomputesItsTokens) {
  // 4 blocks of 4 tokens: two sequences of 8 prompt tokens fit (2 blocks each) until their first
  // decode needs a third block.
  Scheduler s(config(64, 4));
  Sequence& old_seq = s.add(prompt(8), 8);
  Sequence& new_seq = s.add(prompt(8), 8);
  run(s, s.schedule());  // both prefilled: 8 tokens each, 2 blocks each
  EXPECT_EQ(s.blocks().num_free(), 0);
  const SchedulerStep step = s.schedule();  // both need a third block for token 8
  EXPECT_EQ(step.preempted, (std::vector<SequenceId>{new_seq.id}));
  EXPECT_EQ(chunk_sizes(step), (std::map<SequenceId, int64_t>{{old_seq.id, 1}}));
  EXPECT_EQ(new_seq.status, SequenceStatus::kWaiting);
  EXPECT_EQ(new_seq.num_computed, 0);
  EXPECT_EQ(new_seq.num_tokens(), 9);  // its generated token stays, to be recomputed
  run(s, step);
  s.finish(old_seq.id);
  const SchedulerStep again = s.schedule();
  EXPECT_EQ(chunk_sizes(again), (std::map<SequenceId, int64_t>{{new_seq.id, 9}}));
  EXPECT_TRUE(again.chunks[0].samples());
  run(s, again);
  s.finish(new_seq.id);
  EXPECT_EQ(s.blocks().num_free(), 4);
  EXPECT_EQ(s.num_preemptions(), 1u);
}

TEST(Scheduler, ALongPromptAndAStreamOfShortOnesAllFinishAndFreeEveryBlock) {
  Scheduler s(config(16, 20, 4, 6));
  std::mt19937 rng(5);
  std::vector<SequenceId> ids = {s.add(prompt(60), 5).id};  // the long one first: 17 of the 20 blocks
  int steps = 0;
  for (; s.has_work() || steps < 200; ++steps) {
    ASSERT_LT(steps, 5000) << "not every sequence finished";
    if (steps < 200 && steps % 2 == 0) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 12);
      ids.push_back(s.add(prompt(n), 1 + static_cast<int64_t>(rng() % 30)).id);
    }
    const SchedulerStep step = s.schedule();
    EXPECT_LE(step.num_tokens(), 16);
    EXPECT_LE(s.num_running(), 6);
    run(s, step);
    for (const ScheduledChunk& c : step.chunks)
      if (c.sequence->num_tokens() == c.sequence->max_tokens) s.finish(c.sequence->id);
  }
  for (SequenceId id : ids) EXPECT_EQ(s.find(id), nullptr) << "sequence " << id;
  EXPECT_EQ(s.blocks().num_free(), 20);
  EXPECT_GT(s.num_preemptions(), 0u) << "the run was meant to exercise preemption";
}

}  // namespace
}  // namespace dsv4
