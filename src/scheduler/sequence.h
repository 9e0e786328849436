// A request's tokens as the scheduler sees them: the prompt and the generated tokens, how many of
// them the cache already holds, and the cache blocks they take.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/block_manager.h"

namespace dsv4 {

using SequenceId = uint64_t;  // also the arrival order: smaller ids came first

enum class SequenceStatus {
  kWaiting,  // no cache: not admitted yet, or preempted (its cache is recomputed on readmission)
  kRunning,  // has a cache; prefilling in chunks or decoding
};

struct Sequence {
  SequenceId id = 0;
  std::vector<int32_t> tokens;  // prompt, then the generated tokens
  int64_t num_prompt_tokens = 0;
  int64_t max_tokens = 0;       // prompt + the most new tokens it may generate
  int64_t num_computed = 0;     // leading tokens whose cache entries exist
  BlockTable blocks;            // covers num_computed tokens
  // Prefix caching: the leading tokens whose compressed entries it shares from cached blocks
  // (0: none), and the tokens it did not compute on admission (it resumed at num_cached_tokens <=
  // reused_tokens, recomputing the rest of the prefix's window; SequenceCache::resume_on_prefix).
  int64_t reused_tokens = 0;
  int64_t num_cached_tokens = 0;
  // It resumed on the engine's state snapshot of that chain hash (prefix caching without
  // recomputation), rather than recomputing the end of the reused prefix.
  std::optional<uint64_t> resume_snapshot;
  // Prefix caching: its prefill stops at this position (0: none), the last multiple of the
  // alignment before the prompt's end, for the engine to take a state snapshot there (and with
  // SchedulerConfig::prefix_snapshot_interval at its multiples before: Scheduler::snapshot_point).
  int64_t snapshot_at = 0;
  bool no_prefix_hit = false;  // it must compute its whole prompt (prompt logprobs)
  // Prefix caching: the chain hashes of its first full blocks of tokens, as far as the scheduler
  // has needed them (BlockManager::chain_hashes extends them): a waiting sequence is looked up
  // every step, its blocks hashed once.
  std::vector<uint64_t> block_hashes;
  SequenceStatus status = SequenceStatus::kWaiting;
  int64_t num_preemptions = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output() const { return num_tokens() - num_prompt_tokens; }
  // Tokens still to run through the model before the next token can be sampled (1 when decoding).
  int64_t num_uncomputed() const { return num_tokens() - num_computed; }
};

}  // namespace dsv4
