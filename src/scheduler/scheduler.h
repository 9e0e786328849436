// The scheduler of continuous batching (no model, no backend): which sequences run in the next
// step and how many of their tokens, under a token budget and the cache blocks.
//
// Each step:
//   1. running sequences that decode (one token each), oldest first;
//   2. running sequences still prefilling, oldest first, each a chunk of what the budget leaves;
//   3. waiting sequences, oldest first (preempted ones keep their arrival order), while the
//      budget, max_num_seqs and the free blocks allow; the first that does not fit stops the
//      admission, so a long prompt is not overtaken forever by short ones.
// When a running sequence needs a block and none is free, the newest running sequence (newer
// than it) is preempted: its blocks are freed and it goes back to waiting, to be recomputed from
// its tokens (prompt and generated so far) on readmission. A sequence with nothing newer to
// preempt preempts itself. So the oldest sequence always progresses, and every sequence finishes.
// No admission happens in a step that preempted.
//
// Prefix caching (SchedulerConfig::prefix_caching): on admission a sequence looks up the cached
// blocks that begin its tokens (BlockManager::cached_prefix), keeps the longest run that ends on a
// multiple of prefix_alignment tokens and leaves at least one token to compute, and resumes
// prefix_recompute_tokens before its end: those tokens go through the model again to rebuild the
// sequence's own window and compressor states, the ones before are skipped. A hit shorter than
// that is not taken. Where the engine holds a state snapshot at an aligned point of the run
// (add_snapshot, keyed by the chain hash of the blocks up to it), the sequence resumes there
// instead, recomputing nothing, if that skips more. Each prefill stops at the last aligned point
// before its prompt's end (Sequence::snapshot_at), and with prefix_snapshot_interval at every
// multiple of it before that, for the engine to take such a snapshot. A waiting sequence whose
// prompt shares more aligned tokens with a running one's than that one has computed, and which
// could resume further once they are cached, waits for that (later waiting sequences may go
// first) rather than compute them again beside it.
// After each step the sequences' newly full blocks are registered.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "scheduler/block_manager.h"
#include "scheduler/sequence.h"

namespace dsv4 {

struct SchedulerConfig {
  int64_t max_model_len = 0;           // prompt + new tokens of one sequence
  int64_t max_num_seqs = 0;            // running sequences
  int64_t max_num_batched_tokens = 0;  // tokens in one step; >= max_num_seqs
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  bool prefix_caching = false;
  int64_t prefix_alignment = 0;         // a reused prefix is a multiple of it (and of block_size)
  int64_t prefix_recompute_tokens = 0;  // recomputed before a reused prefix's end
  // > 0 (a multiple of prefix_alignment): prefills also stop for a state snapshot at every
  // multiple of it, so that a later prompt sharing only part of this one (a system prompt, then
  // a question of its own) resumes at most this many tokens before where they part.
  int64_t prefix_snapshot_interval = 0;
  // > 0: a sequence's prefill chunk takes at most this many tokens a step (vLLM's
  // long_prefill_token_threshold), so that a long prompt leaves room in each step, and time, for
  // other prompts and keeps the decoding sequences' steps short; 0: up to the step's budget.
  int64_t long_prefill_token_threshold = 0;
};

struct ScheduledChunk {
  Sequence* sequence = nullptr;
  int64_t start = 0;       // == sequence->num_computed when scheduled
  int64_t num_tokens = 0;
  // The chunk reaches the sequence's last token, so its logits give the next token.
  bool samples() const { return start + num_tokens == sequence->num_tokens(); }
};

struct SchedulerStep {
  std::vector<ScheduledChunk> chunks;   // in batch order
  std::vector<SequenceId> preempted;    // their caches are to be dropped
  std::vector<BlockId> new_blocks;      // handed out to the chunks' sequences this step
  int64_t num_tokens() const;
};

class Scheduler {
 public:
  // Throws UsageError naming a config value out of range.
  explicit Scheduler(SchedulerConfig config);

  // Whether a request of this size can ever run; throws UsageError saying why not (the message
  // is for the client). Reads only the config: safe from any thread.
  void check_request(int64_t prompt_tokens, int64_t max_new_tokens) const;
  // Queues a sequence (check_request first). Returns it; it lives until finish().
  Sequence& add(std::vector<int32_t> prompt, int64_t max_new_tokens);

  // Plans the next step (see above). The chunks' sequences stay valid until finish().
  SchedulerStep schedule();
  // After the step's forward: each chunk's tokens are now in its sequence's cache.
  void complete(const SchedulerStep& step);
  // A sampled token joins the sequence (it has max_tokens room left, or throws UsageError).
  void append_token(Sequence& sequence, int32_t id);
  // Removes the sequence (running or waiting) and frees its blocks.
  void finish(SequenceId id);

  Sequence* find(SequenceId id);
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  uint64_t num_preemptions() const { return num_preemptions_; }
  // Prefix caching: tokens of the sequences admitted so far (readmissions included), and how many
  // of them were not computed thanks to a cached prefix (vLLM's prefix_cache_queries / _hits).
  uint64_t prefix_queried_tokens() const { return prefix_queried_tokens_; }
  uint64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  // The engine holds (or has dropped) a state snapshot after the blocks whose chain hash is `key`.
  void add_snapshot(uint64_t key) { snapshots_.insert(key); }
  void drop_snapshot(uint64_t key) { snapshots_.erase(key); }
  const BlockManager& blocks() const { return blocks_; }
  const SchedulerConfig& config() const { return config_; }
  // Whether the prefill of `s` stops at position `at` for the engine's state snapshot: its last
  // aligned point before its prompt's end (Sequence::snapshot_at) and, with
  // prefix_snapshot_interval, the interval's multiples before that.
  bool snapshot_point(const Sequence& s, int64_t at) const;

 private:
  void schedule_running(SchedulerStep& step, int64_t& budget, bool decoding);
  void admit_waiting(SchedulerStep& step, int64_t& budget);
  // The cached blocks sequence `s` resumes on, and where it resumes (0 and none: no usable hit);
  // `snapshot` gets the state snapshot's key when it resumes on one. It and waits_for_shared_prefix
  // extend the sequences' block_hashes.
  std::vector<BlockId> reusable_prefix(Sequence& s, int64_t& resume, std::optional<uint64_t>& snapshot) const;
  // Whether waiting sequence `s`, which would resume at `resume`, shares more aligned prompt tokens
  // with a running sequence's prompt than that one has computed yet, and could resume further once
  // they are cached (on a snapshot the running one leaves, or recomputing less than they skip):
  // admitted now it would compute them again beside it (as SGLang's in-batch prefix caching, it
  // waits until they are cached).
  bool waits_for_shared_prefix(Sequence& s, int64_t resume) const;
  // The last snapshot point of `s` at or before `at`, and its first after `start` (0: none).
  int64_t last_snapshot_point_by(const Sequence& s, int64_t at) const;
  int64_t next_snapshot_point(const Sequence& s, int64_t start) const;
  // The most of `n` tokens from `start` that `s` may run in one chunk (it stops at its next
  // snapshot point).
  int64_t chunk_size(const Sequence& s, int64_t start, int64_t n) const;
  // The tokens a chunk of a sequence with `uncomputed` tokens left may take from `budget`.
  int64_t chunk_limit(int64_t uncomputed, int64_t budget) const;
  void preempt(Sequence& sequence, SchedulerStep& step, int64_t& budget);
  void insert_running(Sequence* sequence);
  void insert_waiting(Sequence* sequence);

  SchedulerConfig config_;
  BlockManager blocks_;
  SequenceId next_id_ = 0;
  std::map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;  // by id (arrival order)
  std::deque<Sequence*> waiting_;   // by id
  uint64_t num_preemptions_ = 0;
  uint64_t prefix_queried_tokens_ = 0;
  uint64_t prefix_hit_tokens_ = 0;
  std::unordered_set<uint64_t> snapshots_;
};

}  // namespace dsv4
