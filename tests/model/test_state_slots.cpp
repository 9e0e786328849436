// State slots on the tiny checkpoint: the free list hands out the lowest slot and takes it back
// with its handle; a sequence in a slot another sequence used, even one filled with NaN, gives a
// fresh cache's logits bit for bit, plain and resuming on a shared prefix (the rows a slot keeps are
// never read); a slot overwritten under a running sequence does change its logits (so the
// comparison sees the slot); state moved to another slot goes on with the same bits; and what a
// recorded forward keys on is the slot, not the sequence.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model_test_util.h"

namespace dsv4::testing {
namespace {

class StateSlotsTest : public CpuTinyModelSuite<> {
 protected:
  // Each forward's last logits of a sequence: its prompt in one chunk, then `decode` ids one at a
  // time; after_prefill runs between the two.
  static std::vector<float> run(SequenceCache& cache, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& decode, const std::function<void()>& after_prefill = {}) {
    std::vector<float> out;
    const auto step = [&](std::span<const int32_t> ids) {
      ForwardBatch batch;
      batch.options.logits = LogitsFor::kLastTokenOfSequence;
      batch.add(cache, ids);
      const std::vector<float> logits = to_floats(model_->forward(*ops_, batch).logits.view());
      out.insert(out.end(), logits.begin(), logits.end());
    };
    step(prompt);
    if (after_prefill) after_prefill();
    for (size_t i = 0; i < decode.size(); ++i) step(std::span(decode).subspan(i, 1));
    return out;
  }
};

TEST_F(StateSlotsTest, TakesTheLowestFreeSlotAndGivesItBackWithItsHandle) {
  const auto slots = model_->new_state_slots(*ops_, 3, DType::kBF16);
  EXPECT_EQ(slots->num_slots(), 3);
  std::optional<StateSlot> a(std::in_place, slots), b(std::in_place, slots), c(std::in_place, slots);
  EXPECT_EQ(a->index(), 0);
  EXPECT_EQ(b->index(), 1);
  EXPECT_EQ(c->index(), 2);
  EXPECT_EQ(slots->free_slots(), 0);
  try {
    StateSlot d(slots);
    FAIL() << "a fourth slot of three";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("all 3"), std::string::npos) << e.what();
  }
  b.reset();
  EXPECT_EQ(slots->free_slots(), 1);
  StateSlot moved(slots);
  EXPECT_EQ(moved.index(), 1);
  StateSlot holder = std::move(moved);  // the move hands the slot over: one slot, given back once
  EXPECT_EQ(holder.index(), 1);
  EXPECT_EQ(slots->free_slots(), 0);
  a.reset();
  c.reset();
  holder = StateSlot();
  EXPECT_EQ(slots->free_slots(), 3);
  EXPECT_THROW(slots->give_back(3), UsageError);
  EXPECT_THROW(slots->give_back(0), UsageError);  // free already
}

TEST_F(StateSlotsTest, ASlotsViewsAreItsOwnRowsOfTheCachesShapes) {
  const ModelConfig& cfg = model_->config();
  const auto slots = model_->new_state_slots(*ops_, 2, DType::kBF16);
  const std::vector<LayerCache> s0 = slots->layers(0), s1 = slots->layers(1);
  const SequenceCache own = model_->new_sequence(*ops_, 64, false);
  ASSERT_EQ(s0.size(), static_cast<size_t>(cfg.num_layers() + cfg.num_mtp_layers()));
  for (size_t l = 0; l < s0.size(); ++l) {
    const LayerCache& want = own.layer(static_cast<int64_t>(l));
    EXPECT_EQ(s0[l].ratio, want.ratio);
    EXPECT_EQ(s0[l].window.shape(), want.window.shape());
    EXPECT_EQ(s0[l].compressor.kv.shape(), want.compressor.kv.shape());
    EXPECT_EQ(s0[l].index_compressor.score.shape(), want.index_compressor.score.shape());
    const auto* w0 = s0[l].window.view().bytes();
    const auto* w1 = s1[l].window.view().bytes();
    EXPECT_EQ(w1 - w0, s0[l].window.numel() * 2) << "layer " << l;  // bf16 rows, slot after slot
  }
  int64_t bytes = 0;
  for (const LayerCache& c : s0)
    for (const DeviceTensor* t : state_tensors(c))
      if (!t->empty()) bytes += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
  EXPECT_EQ(bytes, SequenceCache::fixed_bytes(cfg, DType::kBF16));
  EXPECT_THROW(slots->layers(2), UsageError);
}

TEST_F(StateSlotsTest, AReusedPoisonedSlotGivesAFreshCachesBitsWhileAnOverwrittenOneDoesNot) {
  const ModelConfig& cfg = model_->config();
  const int64_t V = cfg->vocab_size, capacity = 400;
  const auto pool = model_->new_cache_pool(*ops_, CachePool::pages_for(cfg, 2, capacity, 4), DType::kBF16);
  const auto slots = model_->new_state_slots(*ops_, 1, DType::kBF16);
  const std::vector<int32_t> prompt = test_ids(290, V, 5), decode = test_ids(12, V, 6);
  {
    SequenceCache before = model_->new_sequence(*ops_, pool, capacity, PageNaming::kTakenFromPool, slots);
    run(before, test_ids(330, V, 7), test_ids(5, V, 8));
  }
  slots->poison(*ops_, 0);

  SequenceCache fresh = model_->new_sequence(*ops_, capacity, false);
  const std::vector<float> want = run(fresh, prompt, decode);
  SequenceCache reused = model_->new_sequence(*ops_, pool, capacity, PageNaming::kTakenFromPool, slots);
  EXPECT_EQ(reused.slot(), 0);
  EXPECT_TRUE(same_bits(run(reused, prompt, decode), want));

  // A slot poisoned after the prompt: the decode steps read its window and compressor rows.
  const auto own_slots = model_->new_state_slots(*ops_, 1, DType::kBF16);
  SequenceCache in_slot = model_->new_sequence(*ops_, pool, capacity, PageNaming::kTakenFromPool, own_slots);
  const std::vector<float> got = run(in_slot, prompt, decode, [&] { own_slots->poison(*ops_, 0); });
  EXPECT_FALSE(same_bits(got, want));
}

TEST_F(StateSlotsTest, ASequenceResumingOnAPrefixInAPoisonedSlotGetsTheWholePrefixsBits) {
  // The tiny model's window is 128 and its ratios 4 and 128: a prefix of 640 tokens shared through
  // named pages, resumed prefix_recompute_tokens (508) before its end (the rows before that are the
  // slot's NaN, read by the recomputed tokens only).
  const ModelConfig& cfg = model_->config();
  const int64_t V = cfg->vocab_size, capacity = 768, block = 128, reused = 640;
  const int64_t resume = reused - prefix_recompute_tokens(cfg);
  ASSERT_GT(resume, 0) << "the tiny model's recomputation is meant to leave part of the prefix";
  const auto pool = model_->new_cache_pool(*ops_, CachePool::per_block(cfg, capacity / block, block), DType::kBF16);
  const std::vector<int32_t> blocks = {0, 1, 2, 3, 4, 5};
  const std::vector<int32_t> ids = test_ids(reused + 40, V, 9), decode = test_ids(6, V, 10);
  const std::vector<int32_t> prefix(ids.begin(), ids.begin() + reused);

  const auto slots = model_->new_state_slots(*ops_, 1, DType::kBF16);
  {
    SequenceCache writer = model_->new_sequence(*ops_, pool, capacity, PageNaming::kNamedByBlocks, slots);
    writer.name_pages(blocks, block);
    run(writer, prefix, {});
  }
  slots->poison(*ops_, 0);
  SequenceCache resumed = model_->new_sequence(*ops_, pool, capacity, PageNaming::kNamedByBlocks, slots);
  resumed.name_pages(blocks, block);
  resumed.resume_on_prefix(resume, reused);
  const std::vector<int32_t> rest(ids.begin() + resume, ids.end());

  SequenceCache whole = model_->new_sequence(*ops_, capacity, false);
  std::vector<float> want = run(whole, ids, decode);
  const std::vector<float> got = run(resumed, rest, decode);
  EXPECT_TRUE(same_bits(got, want));
}

// A sequence whose state moves to another slot between its prompt and its decode steps (as the
// engine compacts its slots) goes on with the bits of one that stayed, and frees the slot it left.
TEST_F(StateSlotsTest, StateMovedToAnotherSlotGoesOnWithTheSameBits) {
  const ModelConfig& cfg = model_->config();
  const int64_t V = cfg->vocab_size, capacity = 400;
  const auto pool = model_->new_cache_pool(*ops_, CachePool::pages_for(cfg, 2, capacity, 4), DType::kBF16);
  const auto slots = model_->new_state_slots(*ops_, 3, DType::kBF16);
  const std::vector<int32_t> prompt = test_ids(261, V, 11), decode = test_ids(10, V, 12);
  SequenceCache stays = model_->new_sequence(*ops_, capacity, false);
  const std::vector<float> want = run(stays, prompt, decode);

  std::optional<StateSlot> lower(std::in_place, slots);
  SequenceCache moves = model_->new_sequence(*ops_, pool, capacity, PageNaming::kTakenFromPool, slots);
  ASSERT_EQ(moves.slot(), 1);
  const std::vector<float> got = run(moves, prompt, decode, [&] {
    lower.reset();
    moves.move_state(*ops_, StateSlot(slots));
    slots->poison(*ops_, 1);  // what it left is no longer read
  });
  EXPECT_EQ(moves.slot(), 0);
  EXPECT_EQ(slots->free_slots(), 2);
  EXPECT_TRUE(same_bits(got, want));
  EXPECT_THROW(moves.move_state(*ops_, StateSlot(model_->new_state_slots(*ops_, 1, DType::kBF16))), UsageError);
  EXPECT_EQ(moves.slot(), 0);
}

TEST_F(StateSlotsTest, ARecordedForwardKeysOnTheSlotPoolAndCapacityNotTheSequence) {
  const ModelConfig& cfg = model_->config();
  const auto pool = model_->new_cache_pool(*ops_, CachePool::pages_for(cfg, 3, 256, 4), DType::kBF16);
  const auto slots = model_->new_state_slots(*ops_, 2, DType::kBF16);
  const auto in_slot = [&](int64_t capacity, const std::shared_ptr<CachePool>& p) {
    return model_->new_sequence(*ops_, p, capacity, PageNaming::kTakenFromPool, slots);
  };
  std::optional<SequenceCache> first(in_slot(256, pool));
  const SequenceCache other = in_slot(256, pool);
  const SequenceCache::GraphKey key = first->graph_key();
  EXPECT_NE(other.graph_key(), key);  // slot 1
  first.reset();
  std::optional<SequenceCache> next(in_slot(256, pool));
  EXPECT_EQ(next->slot(), 0);
  EXPECT_EQ(next->graph_key(), key);
  EXPECT_NE(next->id(), other.id());
  next.reset();
  EXPECT_NE(in_slot(128, pool).graph_key(), key);  // other block tables: another plan layout
  const auto another_pool = model_->new_cache_pool(*ops_, CachePool::pages_for(cfg, 1, 256, 4), DType::kBF16);
  EXPECT_NE(in_slot(256, another_pool).graph_key(), key);
  EXPECT_NE(model_->new_sequence(*ops_, pool, 256).graph_key(), key);  // a slot of its own
}

}  // namespace
}  // namespace dsv4::testing
