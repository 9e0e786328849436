// The serving engine's API: requests in, streamed tokens and a finish reason out, cancel, stats.
//
// Threads. submit(), RequestHandle and stats() are safe from any thread (the HTTP server's
// handler threads). Steps run on one thread: either the engine's own (start() / stop()), or the
// caller's through step() (tests and the command-line tools, with no engine thread running);
// an engine of several ranks runs each rank's part of a step on that rank's thread while the
// stepping thread waits (see "Data parallelism" below).
// A step schedules the waiting and running requests (src/scheduler), runs one Model::forward
// over all of them, samples (on the backend, or on the host: src/sampling) and pushes one
// OutputChunk per request that got a token into that request's queue.
//
// Delivery: a per-request queue. submit() returns a RequestHandle; its owner pops chunks with
// next() (blocking) or next_for() (with a timeout, to notice a closed connection meanwhile).
// The last chunk carries the finish reason and the request's metrics; after it, done() is true.
// Dropping a handle before its last chunk cancels the request, so a server that loses its client
// only has to let go of the handle.
//
// Stop strings are detected here, in the engine, on the text its tokenizer decodes: each chunk's
// `text` is the new text with a matched stop string (and whatever follows it) cut, and with text
// that might still be the start of a stop string held back until it cannot be. A request with
// stop strings is refused when the engine was made without a tokenizer.
//
// OutputFormat::kJsonObject (response_format json_object, and json_schema with
// GenerateRequest::json_schema) constrains decoding: at each step only tokens whose bytes keep the
// output a prefix of one JSON object (one the schema accepts, as far as sampling/json_schema.h
// enforces schemas) may be drawn
// (sampling/json_token_mask.h, among the tokenizer's vocabulary tokens: no added or special token,
// end of sequence included), and the request ends with kStop as soon as the object closes, so its
// text is one JSON object, or a prefix of one when max_tokens, a stop token or a stop string ends
// it first. The mask costs a pass over the vocabulary on the host per step of each such request.
// Needs the engine's tokenizer, like stop strings. OutputFormat::kChoice (vLLM's guided_choice)
// constrains decoding the same way to the start of one of GenerateRequest::choices
// (sampling/choice_prefix.h), the end of sequence allowed once the text is a choice; it ends
// with kStop when the text is a choice no other one continues. OutputFormat::kRegex (vLLM's
// guided_regex) does the same for a whole match of GenerateRequest::regex (sampling/regex_prefix.h):
// the end of sequence once the text matches, kStop once it matches and no byte can extend it.
//
// SamplingParams::allowed_token_ids meets these masks: only tokens both allow are drawn. When at
// some step none is (a choice none of the listed tokens can continue, min_tokens holding back the
// only listed token), the request ends there with kError and a message naming allowed_token_ids.
// SamplingParams::bad_words_ids bans its tokens on top of both; when the ban leaves no token, the
// request ends the same way with a message naming bad_words.
//
// Data parallelism (docs/ARCHITECTURE.md "Several devices"; vLLM's --data-parallel-size with
// --enable-expert-parallel): an engine of several ranks (EngineRank), each a model holding its
// share of the routed experts on a backend of its own. A request lives on one rank, whose
// scheduler, caches and sampling are its own (attention is data parallel); EngineConfig holds
// for each rank (max_num_seqs, the caches' sizing). Every forward exchanges the MoE layers' rows
// among the ranks, so the ranks step together, each on a thread of its own (runtime/rank_threads.h),
// and a rank with nothing to run serves its experts to the others (Model::forward_without_tokens).
// submit() hands a request to the rank with the fewest open requests; stats() sums the ranks'.
// A rank's forward that fails gives the expert group up (ExpertComm::abort): the other ranks'
// steps fail too, and the engine can serve no more: fault() says why, submit() throws CommError
// (the server answers 503, and /health too, as vLLM's does for a dead engine).
//
// Refused at submit (UsageError, message for the client; CommError once the engine has a fault): an empty prompt, an id outside the
// vocabulary (prompt, stop ids, logit_bias, allowed_token_ids, bad_words_ids), prompt + max_tokens longer than
// max_model_len, sampling values out of range, stop strings or a constrained output format
// without a tokenizer, choices without kChoice or kChoice without valid choices, a regex without
// kRegex or kRegex without one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/cache_sizing.h"
#include "sampling/json_schema.h"
#include "sampling/regex_nfa.h"
#include "sampling/sampling_params.h"

namespace dsv4 {

class ExpertComm;
class ForwardRunner;
class Model;
class Ops;
class Tokenizer;

using RequestId = uint64_t;
using EngineClock = std::chrono::steady_clock;

enum class FinishReason {
  kStop,       // end-of-sequence token, a stop token id, a stop string, or the JSON object closed
  kLength,     // max_tokens generated (or max_model_len reached)
  kCancelled,  // RequestHandle::cancel(), the handle dropped, or the engine destroyed
  kError,      // the step that ran the request failed; OutputChunk::error says why
};
// "stop", "length", "abort", "error": the words of OpenAI's and vLLM's finish_reason.
std::string_view finish_reason_name(FinishReason reason);

struct StopConditions {
  std::optional<int64_t> max_tokens;      // new tokens; none: up to max_model_len
  std::vector<int32_t> stop_token_ids;    // besides the model's eos; the token is part of the output
  std::vector<std::string> stop_strings;  // cut from the text (needs the engine's tokenizer)
  bool ignore_eos = false;                // keep going after the model's eos token
  // vLLM's min_tokens: before this many new tokens neither the eos token (unless ignored) nor a
  // stop token id is drawn and no stop string ends the request. At most max_tokens; not with a
  // JSON output format (the object could close before).
  int64_t min_tokens = 0;
  // vLLM's include_stop_str_in_output: a matched stop string stays in the text (what follows it
  // is still cut).
  bool include_stop_string = false;
};

// What the output must be (see above).
enum class OutputFormat {
  kText,        // anything the model writes
  kJsonObject,  // one JSON object, the request ending when it closes
  kChoice,      // one of GenerateRequest::choices
  kRegex,       // a whole match of GenerateRequest::regex
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StopConditions stop;
  OutputFormat format = OutputFormat::kText;
  // With kJsonObject: the schema the object must meet (none: any object).
  std::shared_ptr<const JsonSchema> json_schema;
  // With kChoice: the strings the text must be one of (not empty, none empty).
  std::shared_ptr<const std::vector<std::string>> choices;
  // With kRegex: the pattern the whole text must match.
  std::shared_ptr<const RegexNfa> regex;
  // [0, 20]: the logprob of every prompt token after the first under the model (the raw
  // distribution, as sampling.logprobs), with that many alternatives, in the first chunk
  // (OpenAI's echo with logprobs, vLLM's prompt_logprobs). Such a request takes no prefix-cache hit,
  // since its whole prompt must run; its prefill steps take every token's logits.
  std::optional<int32_t> prompt_logprobs;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0.0f;            // when sampling.logprobs
  std::vector<TokenLogprob> top;   // sampling.top_logprobs entries, most likely first
  int32_t rank = 0;                // when sampling.logprobs: 1 + the tokens more likely
};

// Times and counts of one request, complete on its last chunk.
struct RequestMetrics {
  EngineClock::time_point arrival;      // submit()
  EngineClock::time_point first_token;  // the first generated token was emitted
  EngineClock::time_point finished;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t preemptions = 0;
  int64_t cached_tokens = 0;  // prompt tokens not computed thanks to a cached prefix (last admission)
  double time_to_first_token_s() const;
  // Mean time per output token after the first; 0 with fewer than two tokens.
  double time_per_output_token_s() const;
  double end_to_end_s() const;
};

struct OutputChunk {
  std::vector<GeneratedToken> tokens;  // the new tokens, in order
  // GenerateRequest::prompt_logprobs, on the first chunk: prompt tokens 1.. in order (the first
  // prompt token has none).
  std::vector<GeneratedToken> prompt_logprobs;
  std::string text;                    // their text when the engine has a tokenizer (see above)
  EngineClock::time_point time;        // when the engine emitted the chunk
  std::optional<FinishReason> finish;  // set on the last chunk only
  std::optional<int32_t> stop_token_id;  // kStop by a token: which one
  std::string stop_string;               // kStop by a stop string: which one
  std::string error;                     // kError: what went wrong
  std::optional<RequestMetrics> metrics;  // on the last chunk
};

class RequestStream;  // the queue shared by the engine and the handle (engine.cpp)

// The caller's end of one request. Move-only; dropping it before the last chunk cancels.
class RequestHandle {
 public:
  RequestHandle(RequestHandle&&) noexcept;
  RequestHandle& operator=(RequestHandle&&) noexcept;
  RequestHandle(const RequestHandle&) = delete;
  RequestHandle& operator=(const RequestHandle&) = delete;
  ~RequestHandle();

  RequestId id() const;
  int64_t prompt_tokens() const;

  // The next chunk, waiting as long as it takes. Throws UsageError once done().
  OutputChunk next();
  // The next chunk if one comes within `timeout` (0: only one already queued), else none.
  // Throws UsageError once done().
  std::optional<OutputChunk> next_for(std::chrono::milliseconds timeout);
  // The last chunk (the one with `finish`) has been returned.
  bool done() const;

  // Asks the engine to stop the request at its next step; the stream then ends with kCancelled
  // (or with whatever finished it first). Idempotent, any thread.
  void cancel();

 private:
  friend class Engine;
  explicit RequestHandle(std::shared_ptr<RequestStream> stream);
  std::shared_ptr<RequestStream> stream_;
};

enum class KvCacheDtype { kAuto, kBf16, kFp8 };

struct EngineConfig {
  int64_t max_model_len = 0;            // prompt + output tokens; 0: the model's max_position_embeddings
  int64_t max_num_seqs = 64;            // sequences in one step
  // Tokens in one step (decode first, then prefill chunks); 0: default_max_num_batched_tokens for
  // the backend's device.
  int64_t max_num_batched_tokens = 0;
  // > 0: the most tokens one request's prefill takes a step (SchedulerConfig's, vLLM's
  // --long-prefill-token-threshold): shorter steps for the decoding requests beside a long prompt,
  // at the cost of its time to first token; 0: no limit but the step's.
  int64_t long_prefill_token_threshold = 0;
  // Cache accounting in blocks of block_size tokens (src/scheduler/block_manager.h). 0 blocks: as
  // many as cache_memory_bytes holds; without it, as many as gpu_memory_utilization leaves room
  // for on a backend with device memory; otherwise enough for max_num_seqs sequences of
  // max_model_len (Engine::cache_sizing says which).
  int64_t block_size = 64;
  int64_t num_cache_blocks = 0;
  // The memory the caches may take (vLLM's --kv-cache-memory-bytes): max_num_seqs sequences'
  // fixed-size state (SequenceCache::fixed_bytes), the rest in blocks (CachePool::block_bytes).
  // UsageError when that holds less than one sequence of max_model_len. 0: not used.
  int64_t cache_memory_bytes = 0;
  // vLLM's --gpu-memory-utilization, in [0, 1]: the share of the device's memory the engine may
  // fill, on a backend that has device memory (Ops::device_memory), when neither num_cache_blocks
  // nor cache_memory_bytes is given. The engine runs one step of the largest kind first, as vLLM's
  // profile run does, and the caches get the share less the memory in use and that step's peak
  // (runtime/cache_sizing.h). 0: not used (the tools default to 0.9).
  double gpu_memory_utilization = 0;
  // Where the sequences' compressed entries and indexer keys live (model/cache_pool.h). false: a
  // pool per sequence, one page of prompt + max_tokens tokens. true: one pool the engine makes at
  // start whose pages are the cache blocks: for ratio m, block b's page holds the block_size / m
  // entries of its tokens (one entry, of the block holding its last token, when block_size divides
  // m; one of the two must divide the other). The same numbers either way (tested on the CPU and
  // on the H200). `serve` and `bench throughput` turn it on (with prefix caching or without).
  bool shared_cache_pool = false;
  // Prefix caching (implies shared_cache_pool): a request whose tokens begin with blocks another
  // request computed shares their entries and computes only the rest, after recomputing the last
  // prefix_recompute_tokens(model) tokens of the shared part to rebuild its own window and
  // compressor states (model/cache.h resume_on_prefix), so its tokens are those it gets without the
  // cache, bit for bit on the CPU. Hits are multiples of block_size and of every compression ratio
  // and longer than that recomputation (a V4-Flash hit saves compute from about 5.6k shared tokens).
  // Each prefill also stops once at the last such multiple before its prompt's end and the engine
  // keeps a copy of the sequence's window and compressor state there (model/cache.h
  // StateSnapshot: 7.4 MB for V4-Flash), so a later request sharing that much (the next turn of a
  // chat, a long system prompt) resumes there recomputing nothing. Likewise a sequence whose decode
  // passes such a multiple keeps a copy of the last (one per running sequence), which joins the
  // others when it finishes, for a next turn that repeats its answer.
  bool enable_prefix_caching = false;
  // The state snapshots kept, least recently used dropped first. 0: 2 * max_num_seqs. They come on
  // top of cache_memory_bytes: at most (max_prefix_snapshots + max_num_seqs) of them at once
  // (gpu_memory_utilization leaves room for that many).
  int64_t max_prefix_snapshots = 0;
  // > 0: prefills also stop for a state snapshot at every multiple of this many tokens (a multiple
  // of the block size and of every compression ratio: 128 for V4), so that a later request
  // sharing only the start of a prompt (a system prompt followed by a question of its own longer
  // than that alignment) resumes at most this many tokens before where the two part; 0: only at
  // the last multiple before each prompt's end. Each stop cuts that prefill's chunk there. Prefix
  // caching only: set without it, the engine refuses the config.
  int64_t prefix_snapshot_interval = 0;
  // With the shared pool: every block's pages are filled with NaN as the block is handed out, so a
  // forward reading a row before writing it (a previous owner's) shows NaN in its output. Costs a
  // copy per page and layer; on by default in debug builds.
#ifdef NDEBUG
  bool kv_canary = false;
#else
  bool kv_canary = true;
#endif
  bool exact_math = false;              // ForwardOptions::exact_math for every step
  // The caches beside default numerics (`--kv-cache-dtype`): bf16 rows, or fp8: attention entries
  // and indexer keys packed as kv/packed_entries.h lays them out, the same numbers in 57%
  // (attention) and 27% (indexer keys) of the bytes. kAuto: fp8 where the backend reads packed
  // entries (Ops::reads_packed_caches), else bf16; resolved when the engine is made. Exact math
  // keeps f32 rows (kFp8 with exact_math is refused).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  // How steps run (CUDA graphs for decode steps, say); must outlive the engine. Null: eagerly.
  ForwardRunner* runner = nullptr;
  // Host threads drawing a step's tokens (sampling is per request, so any count gives the same
  // tokens). 0: default_sampling_threads().
  int sampling_threads = 0;
  // Draw on the backend (Ops::edit_logits, mask_logits, sample_rows, row_logprobs) and bring only
  // ids and logprobs to the host; false: every row of logits to the host and every draw there. The
  // same tokens and logprobs either way (sampling/token_draw.h).
  bool sample_on_backend = true;
};

// The sampling threads an engine takes when EngineConfig::sampling_threads is 0: the machine's
// hardware threads, up to 16.
int default_sampling_threads();

// The tokens of a step when EngineConfig::max_num_batched_tokens is 0, by the device's memory
// (device_total_bytes; 0 on a backend without device memory): vLLM's defaults for its OpenAI
// server, 8192 on a device of 70 GiB or more (H100 / H200 class: an 8k prompt in one chunk,
// prefill's kernels at their best rate), else 2048.
int64_t default_max_num_batched_tokens(int64_t device_total_bytes);

// The size a decode step of n sequences is padded to when the runner records decode steps
// (ForwardRunner::records_decode_steps, with the shared pool): n up to 8, then the next multiple
// of 8 (vLLM pads 3 to 4 and 5-7 to 8 as well; here a small step's padding rows would route to
// experts of their own, a large share of its weight bytes). The padding sequences bring one token
// each at position 0 in free state slots, and their rows are dropped.
int64_t decode_batch_bucket(int64_t n);

// How the engine sized its caches (Engine::cache_sizing), for the start-up report.
struct CacheSizing {
  enum class Rule {
    kNumCacheBlocks,        // EngineConfig::num_cache_blocks
    kCacheMemoryBytes,      // EngineConfig::cache_memory_bytes (over gpu_memory_utilization, as in vLLM)
    kGpuMemoryUtilization,  // the device's memory, from `budget`
    kLongestRequests,       // max_num_seqs sequences of max_model_len
  };
  Rule rule = Rule::kLongestRequests;
  GpuMemoryBudget budget;  // kGpuMemoryUtilization: the numbers measured
  // gpu_memory_utilization was set, but the backend has no device memory to size the caches from
  // (the CPU backend's memory is the host's): kLongestRequests instead.
  bool no_device_memory = false;
};

// A snapshot for /metrics and logs. Counters are totals since the engine was made.
struct EngineStats {
  int64_t running = 0;              // requests with a cache (prefilling or decoding)
  int64_t waiting = 0;              // queued or preempted
  int64_t cache_blocks_total = 0;
  int64_t cache_blocks_used = 0;
  int64_t cache_blocks_cached = 0;  // prefix caching: blocks findable by their tokens, held or free
  int64_t state_slots_used = 0;     // shared pool: the running sequences' state slots
  int64_t prefix_snapshots = 0;     // state snapshots kept
  int64_t prefix_snapshot_bytes = 0;
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;       // prompts of submitted requests
  uint64_t generation_tokens = 0;   // tokens emitted
  uint64_t computed_tokens = 0;     // tokens through the forward, recomputation included
  uint64_t prompt_tokens_computed = 0;  // of them, prompt tokens (a prefix cache's hits are not)
  uint64_t preemptions = 0;
  uint64_t prefix_cache_queries = 0;  // tokens of admitted requests, looked up in the prefix cache
  uint64_t prefix_cache_hits = 0;     // of them, tokens not computed
  uint64_t requests_finished = 0;   // any finish reason
  uint64_t requests_cancelled = 0;
  uint64_t requests_failed = 0;     // kError
  // Sums over finished requests (Prometheus summaries: _sum and _count); the per-request values
  // come with each last chunk's metrics for histograms.
  double time_to_first_token_s_sum = 0;
  uint64_t time_to_first_token_count = 0;
  double time_per_output_token_s_sum = 0;
  uint64_t time_per_output_token_count = 0;
  double end_to_end_s_sum = 0;
  double cache_usage() const {
    return cache_blocks_total > 0 ? static_cast<double>(cache_blocks_used) / static_cast<double>(cache_blocks_total) : 0.0;
  }
};

// One data-parallel rank of an engine (see above); what it points at must outlive the engine.
struct EngineRank {
  const Model* model = nullptr;        // the rank's weights: its share of the routed experts, or all
  Ops* ops = nullptr;                  // the rank's backend, where its caches live and its steps run
  ExpertComm* expert_group = nullptr;  // rank r of a group of every rank; null for an engine of one
};

class Engine {
 public:
  // `model` and `ops` must outlive the engine. Without a tokenizer chunks carry no text and
  // stop strings are refused. Throws UsageError for a config out of range.
  Engine(const Model& model, Ops& ops, EngineConfig config, std::shared_ptr<const Tokenizer> tokenizer = nullptr);
  // An engine of data-parallel ranks (see above): rank r is ranks[r], its expert group's rank r of
  // ranks.size() (an engine of one rank may have none). Each rank's state is made on its own
  // thread. UsageError for ranks that do not make one group, models of different configs, or a
  // ForwardRunner with several ranks (their steps run eagerly).
  Engine(std::span<const EngineRank> ranks, EngineConfig config, std::shared_ptr<const Tokenizer> tokenizer = nullptr);
  // Stops the engine thread; requests still open end with kCancelled.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request (any thread). Throws UsageError when it is refused (see above).
  RequestHandle submit(GenerateRequest request);

  // Starts the engine thread, which runs steps while there is work and sleeps otherwise.
  void start();
  // Lets the current step finish and joins the engine thread; queued requests stay queued.
  void stop();

  // One step on the caller's thread (not while the engine thread runs). Returns whether
  // requests remain open.
  bool step();

  // The config with every default resolved (max_model_len, num_cache_blocks), of each rank.
  const EngineConfig& config() const;
  int data_parallel_size() const { return static_cast<int>(ranks_.size()); }
  // What the caches take at most, on each rank: the blocks' pages and max_num_seqs sequences'
  // fixed-size state, in the engine's cache dtype.
  int64_t cache_bytes() const;
  const CacheSizing& cache_sizing() const;
  // The ranks' stats summed.
  EngineStats stats() const;
  // Why the engine can no longer serve, once it cannot (data-parallel ranks whose expert group a
  // failed forward broke); none while it can. Any thread.
  std::optional<std::string> fault() const;

 private:
  class Impl;     // one rank: its scheduler, caches, requests and steps (engine.cpp)
  class Lockstep;  // several ranks: their threads and the engine thread stepping them together
  bool step_ranks_together();
  std::vector<std::unique_ptr<Impl>> ranks_;
  std::unique_ptr<Lockstep> lockstep_;  // null with one rank
};

}  // namespace dsv4
