// Scheduler: decode first, chunked prefill under the token budget, FCFS admission, preemption of
// the newest by recompute (the policy is described in scheduler.h).
#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace dsv4 {

namespace {

bool by_id(const Sequence* a, const Sequence* b) { return a->id < b->id; }

}  // namespace

int64_t SchedulerStep::num_tokens() const {
  int64_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.num_tokens;
  return n;
}

Scheduler::Scheduler(SchedulerConfig config)
    : config_(config), blocks_(config.num_blocks, config.block_size, config.prefix_caching) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError("scheduler: " + what);
  };
  require(config.max_model_len > 0, "max_model_len = " + std::to_string(config.max_model_len) + " must be positive");
  require(config.max_num_seqs > 0, "max_num_seqs = " + std::to_string(config.max_num_seqs) + " must be positive");
  require(config.long_prefill_token_threshold >= 0,
          "long_prefill_token_threshold = " + std::to_string(config.long_prefill_token_threshold) +
              " must not be negative (0: no limit)");
  require(config.max_num_batched_tokens >= config.max_num_seqs,
          "max_num_batched_tokens = " + std::to_string(config.max_num_batched_tokens) +
              " must be at least max_num_seqs = " + std::to_string(config.max_num_seqs) +
              " (every running sequence decodes a token per step)");
  if (config.prefix_caching) {
    require(config.prefix_alignment > 0 && config.prefix_alignment % config.block_size == 0,
            "prefix_alignment = " + std::to_string(config.prefix_alignment) +
                " must be a positive multiple of block_size = " + std::to_string(config.block_size));
    require(config.prefix_recompute_tokens >= 0,
            "prefix_recompute_tokens = " + std::to_string(config.prefix_recompute_tokens) + " must not be negative");
    require(config.prefix_snapshot_interval >= 0 && config.prefix_snapshot_interval % config.prefix_alignment == 0,
            "prefix_snapshot_interval = " + std::to_string(config.prefix_snapshot_interval) +
                " must be a multiple of " + std::to_string(config.prefix_alignment) +
                " (the cache block size and every compression ratio of the model; 0: off)");
  }
}

void Scheduler::check_request(int64_t prompt_tokens, int64_t max_new_tokens) const {
  if (prompt_tokens <= 0) throw UsageError("the prompt is empty");
  if (max_new_tokens <= 0) throw UsageError("max_tokens = " + std::to_string(max_new_tokens) + " must be positive");
  if (prompt_tokens + max_new_tokens > config_.max_model_len)
    throw UsageError("this model's maximum context length is " + std::to_string(config_.max_model_len) +
                     " tokens, but " + std::to_string(prompt_tokens + max_new_tokens) + " were requested (" +
                     std::to_string(prompt_tokens) + " in the prompt, " + std::to_string(max_new_tokens) +
                     " to generate)");
  const int64_t need = blocks_.blocks_for(prompt_tokens + max_new_tokens);
  if (need > blocks_.num_blocks())
    throw UsageError("the request needs " + std::to_string(need) + " cache blocks of " +
                     std::to_string(blocks_.block_size()) + " tokens, the cache has " +
                     std::to_string(blocks_.num_blocks()));
}

Sequence& Scheduler::add(std::vector<int32_t> prompt, int64_t max_new_tokens) {
  check_request(static_cast<int64_t>(prompt.size()), max_new_tokens);
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->num_prompt_tokens = static_cast<int64_t>(prompt.size());
  s->max_tokens = s->num_prompt_tokens + max_new_tokens;
  s->tokens = std::move(prompt);
  Sequence& ref = *s;
  sequences_.emplace(ref.id, std::move(s));
  insert_waiting(&ref);
  return ref;
}

SchedulerStep Scheduler::schedule() {
  SchedulerStep step;
  int64_t budget = config_.max_num_batched_tokens;
  schedule_running(step, budget, true);
  schedule_running(step, budget, false);
  if (step.preempted.empty()) admit_waiting(step, budget);
  step.new_blocks = blocks_.take_handed_out();
  return step;
}

void Scheduler::schedule_running(SchedulerStep& step, int64_t& budget, bool decoding) {
  // Index-free walk: preemption removes sequences from running_, so each round looks for the
  // oldest sequence of this phase that is not scheduled yet.
  auto scheduled = [&step](const Sequence* s) {
    return std::any_of(step.chunks.begin(), step.chunks.end(), [s](const ScheduledChunk& c) { return c.sequence == s; });
  };
  SequenceId after = 0;
  bool first = true;
  while (budget > 0) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Sequence* s) {
      return (first || s->id > after) && (s->num_uncomputed() == 1) == decoding && !scheduled(s);
    });
    if (it == running_.end()) return;
    Sequence& s = **it;
    first = false;
    after = s.id;
    const int64_t n = chunk_size(s, s.num_computed, chunk_limit(s.num_uncomputed(), budget));
    bool preempted_self = false;
    while (!blocks_.can_grow(s.blocks, s.num_computed + n)) {
      Sequence* newest = running_.back();
      if (newest == &s) {
        preempt(s, step, budget);
        preempted_self = true;
        break;
      }
      preempt(*newest, step, budget);
    }
    if (preempted_self) continue;
    blocks_.grow(s.blocks, s.num_computed + n);
    step.chunks.push_back({&s, s.num_computed, n});
    budget -= n;
  }
}

std::vector<BlockId> Scheduler::reusable_prefix(Sequence& s, int64_t& resume, std::optional<uint64_t>& snapshot) const {
  resume = 0;
  snapshot.reset();
  if (!config_.prefix_caching || s.no_prefix_hit) return {};
  const int64_t bs = config_.block_size, align = config_.prefix_alignment;
  blocks_.chain_hashes(s.tokens, (s.num_tokens() - 1) / bs, s.block_hashes);
  std::vector<BlockId> prefix = blocks_.cached_prefix(s.tokens, s.block_hashes, (s.num_tokens() - 1) / bs);
  int64_t reused = static_cast<int64_t>(prefix.size()) * bs / align * align;
  // The furthest aligned point with a snapshot, if that skips more than recomputing.
  for (int64_t at = reused; at > std::max<int64_t>(0, reused - config_.prefix_recompute_tokens); at -= align) {
    const uint64_t key = blocks_.chain_hash_of(prefix[static_cast<size_t>(at / bs - 1)]);
    if (snapshots_.contains(key)) {
      snapshot = key;
      reused = at;
      break;
    }
  }
  if (!snapshot && reused - config_.prefix_recompute_tokens <= 0) return {};
  resume = snapshot ? reused : reused - config_.prefix_recompute_tokens;
  prefix.resize(static_cast<size_t>(reused / bs));
  return prefix;
}

bool Scheduler::snapshot_point(const Sequence& s, int64_t at) const {
  const int64_t every = config_.prefix_snapshot_interval;
  return s.snapshot_at > 0 && at > 0 && at <= s.snapshot_at && (at == s.snapshot_at || (every > 0 && at % every == 0));
}

int64_t Scheduler::last_snapshot_point_by(const Sequence& s, int64_t at) const {
  const int64_t every = config_.prefix_snapshot_interval;
  if (s.snapshot_at == 0) return 0;
  if (at >= s.snapshot_at) return s.snapshot_at;
  return every > 0 ? at / every * every : 0;
}

int64_t Scheduler::next_snapshot_point(const Sequence& s, int64_t start) const {
  const int64_t every = config_.prefix_snapshot_interval;
  if (s.snapshot_at <= start) return 0;
  return every > 0 ? std::min(s.snapshot_at, (start / every + 1) * every) : s.snapshot_at;
}

int64_t Scheduler::chunk_size(const Sequence& s, int64_t start, int64_t n) const {
  const int64_t stop = next_snapshot_point(s, start);
  return stop > 0 && start + n > stop ? stop - start : n;
}

int64_t Scheduler::chunk_limit(int64_t uncomputed, int64_t budget) const {
  const int64_t n = std::min(uncomputed, budget);
  const int64_t cap = config_.long_prefill_token_threshold;
  return cap > 0 ? std::min(n, cap) : n;
}

bool Scheduler::waits_for_shared_prefix(Sequence& s, int64_t resume) const {
  if (!config_.prefix_caching || s.no_prefix_hit) return false;
  const int64_t bs = config_.block_size, align = config_.prefix_alignment, most = (s.num_tokens() - 1) / align * align;
  for (Sequence* r : running_) {
    if (r->num_computed >= r->num_prompt_tokens || most <= std::max(resume, r->num_computed)) continue;
    // The aligned tokens the two prompts share within the first n, from their blocks' chain
    // hashes (a block's equal only where all tokens up to its end are): alignments are whole
    // blocks, so the count is the tokens' own.
    const int64_t n = std::min(most, r->num_prompt_tokens), blocks = n / bs;
    blocks_.chain_hashes(s.tokens, blocks, s.block_hashes);
    blocks_.chain_hashes(r->tokens, blocks, r->block_hashes);
    const auto first = s.block_hashes.begin();
    const int64_t common = std::mismatch(first, first + blocks, r->block_hashes.begin()).first - first;
    const int64_t shared = common * bs / align * align;
    // Where `s` could resume once `r` has computed the shared tokens: a snapshot `r` leaves, or a
    // hit that recomputes the end of the shared run.
    const int64_t then = std::max(last_snapshot_point_by(*r, shared), shared - config_.prefix_recompute_tokens);
    if (then > resume && shared > r->num_computed) return true;
  }
  return false;
}

void Scheduler::admit_waiting(SchedulerStep& step, int64_t& budget) {
  for (size_t next = 0; budget > 0 && num_running() < config_.max_num_seqs && next < waiting_.size();) {
    Sequence& s = *waiting_[next];
    int64_t resume = 0;
    std::optional<uint64_t> snapshot;
    const std::vector<BlockId> prefix = reusable_prefix(s, resume, snapshot);
    if (waits_for_shared_prefix(s, resume)) {
      ++next;
      continue;
    }
    const int64_t align = config_.prefix_alignment;
    const int64_t snapshot_at = config_.prefix_caching ? (s.num_prompt_tokens - 1) / align * align : 0;
    s.snapshot_at = snapshot_at > resume ? snapshot_at : 0;
    const int64_t n = chunk_size(s, resume, chunk_limit(s.num_tokens() - resume, budget));
    if (!blocks_.can_take(prefix, resume + n)) return;
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next));
    blocks_.take_prefix(s.blocks, prefix);
    blocks_.grow(s.blocks, resume + n);
    s.num_computed = resume;
    s.reused_tokens = static_cast<int64_t>(prefix.size()) * config_.block_size;
    s.num_cached_tokens = resume;
    s.resume_snapshot = snapshot;
    if (config_.prefix_caching) {
      prefix_queried_tokens_ += static_cast<uint64_t>(s.num_tokens());
      prefix_hit_tokens_ += static_cast<uint64_t>(resume);
    }
    s.status = SequenceStatus::kRunning;
    insert_running(&s);
    step.chunks.push_back({&s, resume, n});
    budget -= n;
  }
}

void Scheduler::preempt(Sequence& s, SchedulerStep& step, int64_t& budget) {
  // A sequence already given a chunk this step (a newer decode) gives it back.
  auto chunk = std::find_if(step.chunks.begin(), step.chunks.end(), [&s](const ScheduledChunk& c) { return c.sequence == &s; });
  if (chunk != step.chunks.end()) {
    budget += chunk->num_tokens;
    step.chunks.erase(chunk);
  }
  blocks_.release(s.blocks);
  s.num_computed = 0;
  s.reused_tokens = 0;
  s.resume_snapshot.reset();
  s.status = SequenceStatus::kWaiting;
  ++s.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  insert_waiting(&s);
  step.preempted.push_back(s.id);
}

void Scheduler::complete(const SchedulerStep& step) {
  for (const ScheduledChunk& c : step.chunks) {
    Sequence& s = *c.sequence;
    s.num_computed += c.num_tokens;
    blocks_.cache_full_blocks(s.blocks, s.tokens, s.num_computed);
  }
}

void Scheduler::append_token(Sequence& s, int32_t id) {
  if (s.num_tokens() >= s.max_tokens)
    throw UsageError("sequence " + std::to_string(s.id) + " already has its " + std::to_string(s.max_tokens) +
                     " tokens");
  s.tokens.push_back(id);
}

void Scheduler::finish(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) throw UsageError("scheduler: no sequence " + std::to_string(id));
  Sequence* s = it->second.get();
  if (s->status == SequenceStatus::kRunning)
    running_.erase(std::find(running_.begin(), running_.end(), s));
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
  blocks_.release(s->blocks);
  sequences_.erase(it);
}

Sequence* Scheduler::find(SequenceId id) {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

void Scheduler::insert_running(Sequence* s) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), s, by_id), s);
}

void Scheduler::insert_waiting(Sequence* s) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, by_id), s);
}

}  // namespace dsv4
