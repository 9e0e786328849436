// The block manager and the scheduler on their own (no model): block accounting, decode first,
// chunked prefill under the budget, max_num_seqs, refusal of too-long requests, preemption of the
// newest by recompute, and a simulated serving run in which every sequence finishes and every
// block comes back; prefix caching's hash index, eviction order and admissions that resume.
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
  const std::vector<BlockId> handed = a.blocks;
  BlockTable b = m.share(a);
  EXPECT_EQ(m.ref_count(a.blocks[0]), 2);
  m.release(a);
  EXPECT_EQ(m.num_free(), 7);  // b still holds them
  m.release(b);
  EXPECT_EQ(m.num_free(), 10);
  EXPECT_EQ(m.take_handed_out(), handed);  // what grow gave, once
  EXPECT_TRUE(m.take_handed_out().empty());
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

// long_prefill_token_threshold: each prompt's chunk takes at most 6 tokens of the 32-token budget,
// so two long prompts share every step beside the decoding sequence, each reaching its end in
// chunks of 6; a negative threshold is refused.
TEST(Scheduler, ALongPrefillTokenThresholdCutsEachPromptsChunks) {
  SchedulerConfig c = config(32, 100);
  c.long_prefill_token_threshold = 6;
  Scheduler s(c);
  Sequence& a = s.add(prompt(3), 20);
  run(s, s.schedule());  // 3 tokens: under the threshold in one chunk
  Sequence& b = s.add(prompt(20), 4);
  Sequence& d = s.add(prompt(14), 4);
  std::vector<int64_t> b_chunks, d_chunks;
  while (b.num_output() == 0 || d.num_output() == 0) {
    const SchedulerStep step = s.schedule();
    const std::map<SequenceId, int64_t> sizes = chunk_sizes(step);
    EXPECT_EQ(sizes.at(a.id), 1) << "the decoding sequence decodes every step";
    if (sizes.contains(b.id) && b.num_output() == 0) b_chunks.push_back(sizes.at(b.id));
    if (sizes.contains(d.id) && d.num_output() == 0) d_chunks.push_back(sizes.at(d.id));
    run(s, step);
  }
  EXPECT_EQ(b_chunks, (std::vector<int64_t>{6, 6, 6, 2}));
  EXPECT_EQ(d_chunks, (std::vector<int64_t>{6, 6, 2}));
  c.long_prefill_token_threshold = -1;
  EXPECT_THROW(Scheduler{c}, UsageError);
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

// Tokens 0, 1, 2, ... from `first`.
std::vector<int32_t> counting(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = first + static_cast<int32_t>(i);
  return v;
}

// A sequence that computed `tokens` and ended: its full blocks registered, then released. Returns
// the blocks it had.
std::vector<BlockId> finished_sequence(BlockManager& m, const std::vector<int32_t>& tokens) {
  BlockTable t;
  m.grow(t, static_cast<int64_t>(tokens.size()));
  m.cache_full_blocks(t, tokens, static_cast<int64_t>(tokens.size()));
  const std::vector<BlockId> blocks = t.blocks;
  m.release(t);
  return blocks;
}

TEST(BlockManagerPrefixCache, FindsRegisteredFullBlocksByTheirWholePrefix) {
  BlockManager m(10, 4, true);
  const std::vector<int32_t> a = counting(14);
  BlockTable ta;
  m.grow(ta, 14);
  m.cache_full_blocks(ta, a, 9);  // blocks 0 and 1 are full and computed
  EXPECT_EQ(ta.num_hashed, 2);
  EXPECT_EQ(m.num_cached(), 2);
  EXPECT_EQ(m.cached_prefix(a, 10), std::vector<BlockId>(ta.blocks.begin(), ta.blocks.begin() + 2));
  EXPECT_EQ(m.cached_prefix(a, 1).size(), 1u);
  m.cache_full_blocks(ta, a, 14);  // block 2; block 3 holds 2 tokens: not full
  EXPECT_EQ(m.cached_prefix(a, 10).size(), 3u);

  // The same second block after another first block is not a hit; a changed token ends the run.
  std::vector<int32_t> b = a;
  b[0] = 99;
  EXPECT_TRUE(m.cached_prefix(b, 10).empty());
  b = a;
  b[5] = 99;
  EXPECT_EQ(m.cached_prefix(b, 10).size(), 1u);

  // A second sequence computing the same tokens keeps its own blocks out of the index.
  BlockTable tb;
  m.grow(tb, 8);
  m.cache_full_blocks(tb, a, 8);
  EXPECT_EQ(m.num_cached(), 3);
  EXPECT_EQ(tb.num_hashed, 2);

  // Without prefix caching nothing is found.
  BlockManager off(10, 4);
  BlockTable t;
  off.grow(t, 8);
  off.cache_full_blocks(t, a, 8);
  EXPECT_TRUE(off.cached_prefix(a, 10).empty());
  EXPECT_EQ(off.num_cached(), 0);
}

// Chain hashes kept by the caller (a sequence's block_hashes) are extended block by block, the
// earlier ones kept, and find what hashing the tokens anew finds; a hash with other tokens behind
// it (as a collision would have) is no hit, since the blocks' tokens are still compared.
TEST(BlockManagerPrefixCache, KeptChainHashesFindWhatTheTokensFind) {
  BlockManager m(10, 4, true);
  const std::vector<int32_t> a = counting(14);
  BlockTable ta;
  m.grow(ta, 14);
  m.cache_full_blocks(ta, a, 14);
  std::vector<uint64_t> hashes;
  m.chain_hashes(a, 1, hashes);
  ASSERT_EQ(hashes.size(), 1u);
  const uint64_t first = hashes[0];
  m.chain_hashes(a, 10, hashes);  // only 3 blocks are full
  ASSERT_EQ(hashes.size(), 3u);
  EXPECT_EQ(hashes[0], first);
  for (size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(hashes[i], m.chain_hash_of(ta.blocks[i])) << "block " << i;
  EXPECT_EQ(m.cached_prefix(a, hashes, 10), m.cached_prefix(a, 10));
  EXPECT_EQ(m.cached_prefix(a, hashes, 2).size(), 2u);

  std::vector<int32_t> b = a;
  b[9] = 99;  // block 2's tokens differ, its hash kept from a's
  EXPECT_EQ(m.cached_prefix(b, hashes, 10).size(), 2u);
  EXPECT_THROW(m.cached_prefix(a, std::span<const uint64_t>(hashes).first(1), 10), UsageError);
}

TEST(BlockManagerPrefixCache, SharedBlocksAreCountedAndFreeCachedOnesEvictedLast) {
  BlockManager m(6, 4, true);
  const std::vector<int32_t> a = counting(12);
  const std::vector<BlockId> blocks = finished_sequence(m, a);
  EXPECT_EQ(m.num_free(), 6);
  EXPECT_EQ(m.num_cached(), 3);  // free, but still found

  // Taking the cached prefix revives its blocks: they leave the free list.
  const std::vector<BlockId> prefix = m.cached_prefix(a, 2);
  ASSERT_EQ(prefix, std::vector<BlockId>(blocks.begin(), blocks.begin() + 2));
  EXPECT_TRUE(m.can_take(prefix, 24));    // 2 shared + 4 fresh of the 6
  EXPECT_FALSE(m.can_take(prefix, 28));   // 2 shared + 5 fresh
  BlockTable tb;
  m.take_prefix(tb, prefix);
  EXPECT_EQ(m.num_free(), 4);
  EXPECT_EQ(m.ref_count(blocks[0]), 1);
  EXPECT_THROW(m.take_prefix(tb, prefix), UsageError);  // not empty

  // Growing takes the three never-cached blocks first, then evicts the free cached block 2.
  m.grow(tb, 20);
  EXPECT_EQ(m.num_cached(), 3);
  m.grow(tb, 24);
  EXPECT_EQ(m.num_cached(), 2);
  EXPECT_EQ(m.cached_prefix(a, 10).size(), 2u);
  m.release(tb);
  EXPECT_EQ(m.num_free(), 6);
}

TEST(BlockManagerPrefixCache, ASequencesLaterBlocksAreEvictedBeforeItsEarlierOnes) {
  BlockManager m(4, 4, true);
  const std::vector<int32_t> a = counting(16);
  finished_sequence(m, a);
  BlockTable t;
  m.grow(t, 4);  // one block evicted: the last of a's
  EXPECT_EQ(m.cached_prefix(a, 10).size(), 3u);
  m.grow(t, 8);
  EXPECT_EQ(m.cached_prefix(a, 10).size(), 2u);
}

// Random operations on a prefix-caching block manager, against a model of what it must hold:
// reference counts equal the tables holding a block, the free count is the blocks no table holds,
// and a lookup never hands one stream's blocks to another past the tokens they share.
TEST(BlockManagerPrefixCache, RandomOperationsKeepTheInvariants) {
  constexpr int64_t kBlocks = 24, kSize = 4;
  BlockManager m(kBlocks, kSize, true);
  std::mt19937 rng(11);
  // Three token streams sharing beginnings, so lookups hit and miss.
  std::vector<std::vector<int32_t>> streams(3, counting(40));
  for (size_t k = 1; k < streams.size(); ++k)
    for (size_t i = 12 * k; i < streams[k].size(); ++i) streams[k][i] = 1000 * static_cast<int32_t>(k) + static_cast<int32_t>(i);
  struct Live {
    BlockTable table;
    size_t stream = 0;
    int64_t tokens = 0;
  };
  std::vector<Live> live;
  for (int op = 0; op < 4000; ++op) {
    const int kind = static_cast<int>(rng() % 4);
    if (kind == 0 && live.size() < 6) {  // a new sequence, starting on what the cache has
      Live l;
      l.stream = rng() % streams.size();
      const std::vector<int32_t>& tokens = streams[l.stream];
      const std::vector<BlockId> prefix = m.cached_prefix(tokens, 9);
      // Streams 1 and 2 part from stream 0 (and each other) after 12 and 24 tokens: a run found
      // for one never takes blocks another computed past that point.
      const auto parting = [](size_t a, size_t b) { return a == 0 || b == 0 ? 12 * std::max(a, b) : size_t{12}; };
      for (size_t i = 0; i < prefix.size(); ++i) {
        for (const Live& other : live) {
          if (other.stream == l.stream || i * kSize < parting(other.stream, l.stream)) continue;
          if (i < other.table.blocks.size()) {
            EXPECT_NE(prefix[i], other.table.blocks[i]) << "block " << i;
          }
        }
      }
      const int64_t start = static_cast<int64_t>(prefix.size()) * kSize;
      if (!m.can_take(prefix, start + 1)) continue;
      m.take_prefix(l.table, prefix);
      m.grow(l.table, start + 1);
      l.tokens = start + 1;
      live.push_back(std::move(l));
    } else if (kind == 1 && !live.empty()) {  // a sequence grows and registers its full blocks
      Live& l = live[rng() % live.size()];
      const int64_t more = std::min<int64_t>(1 + static_cast<int64_t>(rng() % 6), 40 - l.tokens);
      if (more <= 0 || !m.can_grow(l.table, l.tokens + more)) continue;
      m.grow(l.table, l.tokens + more);
      l.tokens += more;
      m.cache_full_blocks(l.table, streams[l.stream], l.tokens);
    } else if (kind == 2 && !live.empty()) {  // a sequence ends
      const size_t i = rng() % live.size();
      m.release(live[i].table);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (kind == 3 && !live.empty()) {  // a fork shares a table
      if (live.size() >= 6) continue;
      Live copy = live[rng() % live.size()];
      copy.table = m.share(copy.table);
      live.push_back(std::move(copy));
    }
    std::map<BlockId, int32_t> holders;
    for (const Live& l : live) {
      EXPECT_EQ(static_cast<int64_t>(l.table.blocks.size()), m.blocks_for(l.tokens));
      for (BlockId b : l.table.blocks) ++holders[b];
    }
    for (BlockId b = 0; b < kBlocks; ++b) {
      const auto it = holders.find(b);
      ASSERT_EQ(m.ref_count(b), it == holders.end() ? 0 : it->second) << "block " << b << " at op " << op;
    }
    ASSERT_EQ(m.num_free(), kBlocks - static_cast<int64_t>(holders.size())) << "op " << op;
  }
  for (Live& l : live) m.release(l.table);
  EXPECT_EQ(m.num_free(), kBlocks);
  EXPECT_GT(m.num_cached(), 0);
}

SchedulerConfig caching(int64_t blocks, int64_t recompute) {
  SchedulerConfig c = config(64, blocks, 4, 8);
  c.prefix_caching = true;
  c.prefix_alignment = 8;
  c.prefix_recompute_tokens = recompute;
  return c;
}

TEST(Scheduler, AdmitsAPrefixHitAtItsResumePointAndCountsIt) {
  Scheduler s(caching(40, 5));
  Sequence& a = s.add(counting(30), 2);
  const SchedulerStep first = s.schedule();
  EXPECT_EQ(first.chunks.at(0).num_tokens, 24);  // the prefill stops at the last aligned point (snapshot_at)
  EXPECT_EQ(a.snapshot_at, 24);
  run(s, first);
  run(s, s.schedule());  // 30 tokens computed: blocks 0-6 full (28 tokens)
  const uint64_t at_24 = s.blocks().chain_hash_of(a.blocks.blocks.at(5));
  s.finish(a.id);
  EXPECT_EQ(s.blocks().num_cached(), 7);

  // b shares 27 tokens; 6 blocks match (24 tokens), aligned to 8: 24 reused, resume at 24 - 5.
  std::vector<int32_t> tokens = counting(27);
  tokens.push_back(500);
  Sequence& b = s.add(tokens, 2);
  const SchedulerStep step = s.schedule();
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(step.chunks[0].start, 19);
  EXPECT_EQ(step.chunks[0].num_tokens, 24 - 19);  // to its own snapshot point, 24
  EXPECT_EQ(b.reused_tokens, 24);
  EXPECT_EQ(b.num_cached_tokens, 19);
  EXPECT_FALSE(b.resume_snapshot.has_value());
  EXPECT_EQ(s.prefix_queried_tokens(), 30u + 28u);
  EXPECT_EQ(s.prefix_hit_tokens(), 19u);
  run(s, step);
  s.finish(b.id);
  EXPECT_EQ(s.blocks().num_free(), 40);

  // With the engine's state snapshot after 24 tokens, the same request resumes at 24 itself.
  s.add_snapshot(at_24);
  Sequence& again = s.add(tokens, 2);
  const SchedulerStep resumed = s.schedule();
  EXPECT_EQ(resumed.chunks.at(0).start, 24);
  EXPECT_EQ(again.resume_snapshot, at_24);
  EXPECT_EQ(again.snapshot_at, 0);  // nothing new to snapshot before its prompt's end
  run(s, resumed);
  s.finish(again.id);
  s.drop_snapshot(at_24);
  Sequence& dropped = s.add(tokens, 2);
  EXPECT_EQ(s.schedule().chunks.at(0).start, 19);
  s.finish(dropped.id);

  // A hit no longer than the recomputation is not taken; nor is a whole prompt (a token must run).
  Scheduler t(caching(40, 16));
  run(t, t.schedule());  // nothing to do
  Sequence& c = t.add(counting(16), 1);
  run(t, t.schedule());
  t.finish(c.id);
  Sequence& d = t.add(counting(17), 1);
  EXPECT_EQ(t.schedule().chunks.at(0).start, 0);
  EXPECT_EQ(d.reused_tokens, 0);
  Scheduler u(caching(40, 0));
  Sequence& e = u.add(counting(16), 1);
  run(u, u.schedule());
  u.finish(e.id);
  Sequence& f = u.add(counting(16), 1);
  EXPECT_EQ(u.schedule().chunks.at(0).start, 8);  // 16 tokens: 3 blocks may match, aligned to 8
  EXPECT_EQ(f.reused_tokens, 8);
}

TEST(Scheduler, PrefixCachingRefusesAnAlignmentThatIsNotAMultipleOfTheBlockSize) {
  SchedulerConfig c = caching(40, 0);
  c.prefix_alignment = 6;
  EXPECT_THROW(Scheduler{c}, UsageError);
}

// With a snapshot interval a prefill stops at each of its multiples too, and a later prompt that
// shares only the start of this one resumes on the snapshot before where they part.
TEST(Scheduler, PrefillsStopAtEverySnapshotIntervalAndAShorterSharedStartResumesThere) {
  SchedulerConfig c = caching(40, 100);  // a recomputed hit would never pay: only snapshots hit
  c.prefix_snapshot_interval = 8;
  Scheduler s(c);
  Sequence& a = s.add(counting(30), 2);
  std::vector<int64_t> stops;
  while (a.num_computed < 30) {
    const SchedulerStep step = s.schedule();
    stops.push_back(step.chunks.at(0).start + step.chunks.at(0).num_tokens);
    run(s, step);
  }
  EXPECT_EQ(stops, (std::vector<int64_t>{8, 16, 24, 30}));
  for (const int64_t at : {int64_t{8}, int64_t{16}, int64_t{24}}) EXPECT_TRUE(s.snapshot_point(a, at)) << at;
  EXPECT_FALSE(s.snapshot_point(a, 12));
  EXPECT_FALSE(s.snapshot_point(a, 30));
  const uint64_t at_16 = s.blocks().chain_hash_of(a.blocks.blocks.at(3));
  s.finish(a.id);
  s.add_snapshot(at_16);

  // b shares 19 tokens, then its own 11: it resumes at 16 on the snapshot, and stops at 24 for its own.
  std::vector<int32_t> tokens = counting(19);
  for (int32_t t = 0; t < 11; ++t) tokens.push_back(500 + t);
  Sequence& b = s.add(tokens, 2);
  const SchedulerStep step = s.schedule();
  EXPECT_EQ(step.chunks.at(0).start, 16);
  EXPECT_EQ(step.chunks.at(0).num_tokens, 8);
  EXPECT_EQ(b.resume_snapshot, at_16);
  run(s, step);
  s.finish(b.id);

  // Without the interval only the last point (24) stops a prefill: the shorter shared start misses.
  Scheduler t(caching(40, 100));
  Sequence& d = t.add(counting(30), 2);
  EXPECT_EQ(t.schedule().chunks.at(0).num_tokens, 24);
  EXPECT_FALSE(t.snapshot_point(d, 16));

  SchedulerConfig odd = caching(40, 0);
  odd.prefix_snapshot_interval = 12;  // not a multiple of the alignment, 8
  EXPECT_THROW(Scheduler{odd}, UsageError);
}

// Two prompts sharing 24 aligned tokens, submitted together: the second waits while the first
// computes them (a third, sharing nothing, goes first), then resumes on the snapshot at 24 rather
// than compute the shared tokens beside it. Where the first leaves no snapshot it could resume on
// (no interval: its one point, 32, lies past the shared run), the second does not wait.
TEST(Scheduler, APromptSharingARunningPrefillsTokensWaitsForThem) {
  SchedulerConfig c = caching(80, 100);
  c.prefix_snapshot_interval = 8;
  Scheduler s(c);
  std::vector<int32_t> shared = counting(27);
  shared.insert(shared.end(), {500, 501, 502, 503, 504, 505, 506, 507, 508});
  Sequence& a = s.add(counting(36), 2);
  Sequence& b = s.add(shared, 2);
  Sequence& other = s.add(prompt(5), 20);
  std::vector<int64_t> b_waited_at;
  while (b.status == SequenceStatus::kWaiting) {
    const SchedulerStep step = s.schedule();
    b_waited_at.push_back(a.num_computed);
    run(s, step);
    if (a.num_computed == 24) s.add_snapshot(s.blocks().chain_hash_of(a.blocks.blocks.at(5)));
  }
  EXPECT_EQ(b_waited_at, (std::vector<int64_t>{0, 8, 16, 24}));  // a's position when each step was planned
  EXPECT_EQ(b.num_cached_tokens, 24);
  EXPECT_NE(other.status, SequenceStatus::kWaiting);

  Scheduler t(caching(80, 100));
  Sequence& d = t.add(counting(36), 2);
  Sequence& e = t.add(shared, 2);
  const SchedulerStep together = t.schedule();
  EXPECT_EQ(together.chunks.size(), 2u);
  EXPECT_EQ(d.snapshot_at, 32);
  EXPECT_EQ(e.num_cached_tokens, 0);
}

}  // namespace
}  // namespace dsv4
