// The engine: the request queues shared with the callers, and the step loop that runs the
// scheduler's plan through the model and the sampler (the contract is in engine.h).
#include "runtime/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <list>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/cache_pool.h"
#include "model/forward_runner.h"
#include "model/model.h"
#include "ops/expert_comm.h"
#include "runtime/rank_threads.h"
#include "sampling/choice_prefix.h"
#include "sampling/json_token_mask.h"
#include "sampling/output_constraint.h"
#include "sampling/sampler.h"
#include "sampling/token_draw.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

namespace {

double seconds(EngineClock::duration d) { return std::chrono::duration<double>(d).count(); }

// A backend tensor [shape] of `dtype` holding `host`'s bytes (plain structs of dtype words).
template <typename T>
DeviceTensor upload_words(Ops& ops, const std::vector<T>& host, DType dtype, Shape shape) {
  DeviceTensor t = ops.alloc_output(dtype, shape);
  ops.upload(host_view(host.data(), dtype, std::move(shape)), t.view());
  return t;
}

// A backend tensor's elements on the host.
template <typename T>
std::vector<T> download_words(Ops& ops, const DeviceTensor& t) {
  std::vector<T> host(static_cast<size_t>(t.numel()));
  ops.download(t.view(), host_view(host.data(), t.dtype(), t.shape()));
  return host;
}

// A sequence's tokens as the sampler sees them: its prompt, and its output so far.
TokenHistory history_of(const Sequence& s) {
  const std::span<const int32_t> tokens(s.tokens);
  const auto prompt = static_cast<size_t>(s.num_prompt_tokens);
  return {tokens.first(prompt), tokens.subspan(prompt)};
}

// A token as the engine reports it: the sampler's choice with its logprob, rank and alternatives.
GeneratedToken generated_token(const TokenChoice& choice) {
  GeneratedToken token{choice.id, choice.logprob, {}, choice.rank};
  for (const auto& [id, logprob] : choice.top) token.top.push_back({id, logprob});
  return token;
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

double RequestMetrics::time_to_first_token_s() const { return seconds(first_token - arrival); }

double RequestMetrics::time_per_output_token_s() const {
  return completion_tokens >= 2 ? seconds(finished - first_token) / static_cast<double>(completion_tokens - 1) : 0.0;
}

double RequestMetrics::end_to_end_s() const { return seconds(finished - arrival); }

// One request's chunks on their way from the engine thread to the handle's owner.
class RequestStream {
 public:
  RequestStream(RequestId id, int64_t prompt_tokens) : id(id), prompt_tokens(prompt_tokens) {}

  void push(OutputChunk chunk) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(chunk));
    }
    ready_.notify_all();
  }

  // Waits up to `timeout` (none: forever) for a chunk.
  std::optional<OutputChunk> pop(std::optional<std::chrono::milliseconds> timeout) {
    std::unique_lock lock(mutex_);
    if (done_) throw UsageError("request " + std::to_string(id) + ": its stream has ended");
    auto has_chunk = [this] { return !queue_.empty(); };
    if (timeout)
      ready_.wait_for(lock, *timeout, has_chunk);
    else
      ready_.wait(lock, has_chunk);
    if (queue_.empty()) return std::nullopt;
    OutputChunk chunk = std::move(queue_.front());
    queue_.pop_front();
    done_ = chunk.finish.has_value();
    return chunk;
  }

  bool done() const {
    std::lock_guard lock(mutex_);
    return done_;
  }

  const RequestId id;
  const int64_t prompt_tokens;
  std::atomic<bool> cancel_requested{false};

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<OutputChunk> queue_;
  bool done_ = false;  // the last chunk was popped
};

RequestHandle::RequestHandle(std::shared_ptr<RequestStream> stream) : stream_(std::move(stream)) {}
RequestHandle::RequestHandle(RequestHandle&&) noexcept = default;
RequestHandle& RequestHandle::operator=(RequestHandle&& other) noexcept {
  if (this != &other) {
    if (stream_ && !stream_->done()) stream_->cancel_requested = true;
    stream_ = std::move(other.stream_);
  }
  return *this;
}
RequestHandle::~RequestHandle() {
  if (stream_ && !stream_->done()) stream_->cancel_requested = true;
}
RequestId RequestHandle::id() const { return stream_->id; }
int64_t RequestHandle::prompt_tokens() const { return stream_->prompt_tokens; }
OutputChunk RequestHandle::next() { return *stream_->pop(std::nullopt); }
std::optional<OutputChunk> RequestHandle::next_for(std::chrono::milliseconds timeout) { return stream_->pop(timeout); }
bool RequestHandle::done() const { return stream_->done(); }
void RequestHandle::cancel() { stream_->cancel_requested = true; }

class Engine::Impl {
 public:
  // Rank `rank` of `ranks` (EngineRank; `group` null with one rank): its request ids are rank +
  // k ranks, so that no two ranks give out the same.
  Impl(const Model& model, Ops& ops, EngineConfig config, std::shared_ptr<const Tokenizer> tokenizer, ExpertComm* group,
       int rank, int ranks)
      : model_(model), ops_(ops), group_(group), config_(resolve(config, model, ops, group, sizing_)),
        tokenizer_(std::move(tokenizer)), scheduler_(scheduler_config(config_, model)),
        sampling_pool_(config_.sampling_threads), seeds_(std::random_device{}()),
        next_request_id_(static_cast<RequestId>(rank)), request_id_stride_(static_cast<RequestId>(ranks)) {
    if (config_.shared_cache_pool) {
      cache_pool_ = model_.new_cache_pool(ops_, pool_pages(), cache_dtype(config_));
      state_slots_ = model_.new_state_slots(ops_, config_.max_num_seqs, cache_dtype(config_));
    }
    publish_stats();
  }

  ~Impl() {
    stop();
    std::vector<SequenceId> open;
    for (const auto& [id, request] : requests_) open.push_back(id);
    for (SequenceId id : open) end_early(requests_.at(id), FinishReason::kCancelled, "");
    for (Submission& s : incoming_) {
      OutputChunk last;
      last.time = EngineClock::now();
      last.finish = FinishReason::kCancelled;
      s.stream->push(std::move(last));
    }
  }

  RequestHandle submit(GenerateRequest request);
  void start();
  void stop();
  bool step();
  const EngineConfig& config() const { return config_; }
  const CacheSizing& cache_sizing() const { return sizing_; }
  int64_t cache_bytes() const {
    return config_.num_cache_blocks * CachePool::block_bytes(model_.config(), cache_dtype(config_), config_.block_size) +
           config_.max_num_seqs * SequenceCache::fixed_bytes(model_.config(), cache_dtype(config_));
  }
  EngineStats stats() const {
    std::lock_guard lock(stats_mutex_);
    return stats_;
  }
  // Why this rank can no longer serve, once it cannot: its expert group broken (a forward failed
  // on some rank, Engine::fault).
  std::optional<std::string> fault() const {
    std::lock_guard lock(stats_mutex_);
    return fault_;
  }
  // Requests submitted and not finished as of the last step: what submit() balances the ranks by.
  int64_t open_requests() const {
    int64_t incoming = 0;
    {
      std::lock_guard lock(submit_mutex_);
      incoming = static_cast<int64_t>(incoming_.size());
    }
    const EngineStats s = stats();
    return incoming + s.running + s.waiting;
  }

 private:
  struct Submission {
    GenerateRequest request;
    std::shared_ptr<RequestStream> stream;
    uint64_t seed = 0;
    int64_t max_new_tokens = 0;
    EngineClock::time_point arrival;
  };
  // A request on the engine thread.
  struct Request {
    std::shared_ptr<RequestStream> stream;
    SamplingParams sampling;
    StopConditions stop;
    uint64_t seed = 0;
    Sequence* sequence = nullptr;
    std::optional<SequenceCache> cache;   // while running
    std::optional<StreamDecoder> decoder;  // with a tokenizer
    std::unique_ptr<OutputConstraint> constraint;  // any format but kText: the output so far against it
    std::string text;                      // decoded so far (stop string cut)
    std::optional<int32_t> prompt_logprobs;  // GenerateRequest::prompt_logprobs
    std::vector<GeneratedToken> prompt_token_logprobs;  // prompt tokens 1.., sent with the first chunk
    bool prompt_logprobs_sent = false;
    // Prefix caching: the state at the last aligned point its decode passed, kept with the others
    // when it finishes (a next chat turn that repeats its answer resumes there).
    std::optional<std::pair<uint64_t, StateSnapshot>> decode_snapshot;
    size_t text_sent = 0;
    RequestMetrics metrics;
  };

  // One token a step samples: what its draw needs besides the logits (made before the draw, for
  // the host sampler and the backend alike), where it is drawn, and what came of it.
  struct StepDraw {
    size_t chunk = 0;
    Request* request = nullptr;
    const Sequence* sequence = nullptr;
    std::vector<uint8_t> allowed;  // a dense mask (an output constraint's, min_tokens'); empty: every token
    std::string dead_end;          // why no token may be drawn: the request ends with this instead
    bool on_backend = false;       // drawn by Ops::sample_rows
    TokenChoice choice;
    std::string error;  // why the draw failed (logits with no finite largest value): the request fails
  };
  // The step's draws, one per chunk that samples, in order: their masks and dead ends.
  std::vector<StepDraw> plan_draws(const SchedulerStep& plan);
  // The logit edits of a draw, for its row of the step's logits: logit_bias, penalties and the
  // bans of its bad words.
  std::vector<LogitEdit> draw_edits(const StepDraw& d) const {
    const TokenHistory history = history_of(*d.sequence);
    const SamplingParams& sampling = d.request->sampling;
    return logit_edits(sampling, history, banned_by_bad_words(sampling.bad_words_ids, history.output),
                       static_cast<size_t>(model_.config()->vocab_size), static_cast<int32_t>(d.chunk));
  }
  // The draws marked on_backend, on the backend: their edits and dense masks (mask_logits: the
  // draw's mask and allowed_token_ids together), sample_rows, and the raw logprobs of those that
  // ask for them (taken before the edits); only ids and logprobs come back, into their choices.
  // The step's other rows get a greedy draw whose id is unused.
  void draw_on_backend(std::vector<StepDraw>& draws, TensorView logits);

  // The config with its defaults resolved and the caches sized; `sizing` says how.
  static EngineConfig resolve(EngineConfig c, const Model& model, Ops& ops, ExpertComm* group, CacheSizing& sizing);
  // The caches' dtype (after resolve, which has checked kv_cache_dtype against exact_math).
  static DType cache_dtype(const EngineConfig& c) {
    if (c.exact_math) return DType::kF32;
    return c.kv_cache_dtype == KvCacheDtype::kFp8 ? DType::kF8E4M3 : DType::kBF16;
  }
  static CacheFootprint cache_footprint(const EngineConfig& c, const Model& model);
  static std::optional<GpuMemoryBudget> measure_device_memory(const EngineConfig& c, const Model& model, Ops& ops,
                                                              ExpertComm* group);

  static SchedulerConfig scheduler_config(const EngineConfig& c, const Model& model);
  CachePool::PagesByRatio pool_pages() const;
  // A cache for a sequence of up to `tokens` tokens.
  SequenceCache new_sequence(int64_t tokens) const;
  // With the shared pool: a cache of max_model_len in a free state slot, its pages named by blocks.
  SequenceCache slot_sequence() const;
  // A decode step's chunks in the order of their sequences' state slots.
  void order_decode_by_slot(SchedulerStep& plan) const;
  // Moves the state of sequences in slots >= the number of caches into the free slots below it.
  void compact_slots();
  // Pads a decode step for a runner that records them to the next decode_batch_bucket size with
  // sequences of one token at position 0 in free slots; returns their caches (the batch's last).
  std::vector<SequenceCache> pad_decode_batch(ForwardBatch& batch) const;
  void take_snapshots(const SchedulerStep& plan);
  void take_prompt_logprobs(const SchedulerStep& plan);
  void keep_snapshot(uint64_t key, StateSnapshot snapshot);
  void take_submissions();
  void emit(Request& r, const TokenChoice& choice, EngineClock::time_point now, std::vector<SequenceId>& finished);
  size_t stop_string_holdback(const Request& r) const;
  const JsonTokenMask& constraint_vocab();
  void end_early(Request& r, FinishReason reason, const std::string& error);
  void finalize(Request& r, OutputChunk& last);
  void publish_stats();
  void loop();
  // With an expert group, after a step that ran no forward: the step's exchanges, serving this
  // rank's experts to the others (every rank makes one forward a step). A group an earlier
  // failure broke (CommError) is left as it is: this rank has no request to fail.
  void serve_experts_without_tokens();
  void note_fault(const std::string& why) {
    std::lock_guard lock(stats_mutex_);
    if (!fault_) fault_ = why;
  }

  const Model& model_;
  Ops& ops_;
  ExpertComm* const group_;  // EngineRank::expert_group
  CacheSizing sizing_;  // set while config_ is resolved
  const EngineConfig config_;
  const std::shared_ptr<const Tokenizer> tokenizer_;

  // Engine thread only.
  Scheduler scheduler_;
  std::unordered_map<SequenceId, Request> requests_;
  std::vector<float> logits_;               // the step's sampling rows, [chunks, V]
  std::vector<float> all_logits_;           // every token's, [T, V], in steps that need them
  std::vector<DrawRow> draw_rows_;          // the step's draws, when made on the backend
  std::vector<LogitEdit> draw_edits_;       // and their logits' edits
  std::optional<JsonTokenMask> constraint_vocab_;  // made when the first constrained request samples
  ThreadPool sampling_pool_;                // the step's draws (EngineConfig::sampling_threads)
  std::shared_ptr<CachePool> cache_pool_;   // EngineConfig::shared_cache_pool
  // With the shared pool: the running sequences' fixed-size state, a slot each (at most
  // max_num_seqs run at once), so that a decode step's buffers are those of its slots.
  std::shared_ptr<StateSlots> state_slots_;
  // Prefix caching's state snapshots by the chain hash of the blocks before them, most recently
  // used first.
  std::list<std::pair<uint64_t, StateSnapshot>> snapshots_;
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, StateSnapshot>>::iterator> snapshot_index_;
  EngineStats counters_;  // the totals; copied into stats_ after each step

  mutable std::mutex submit_mutex_;  // guards the members below
  std::condition_variable wake_;
  std::vector<Submission> incoming_;
  std::mt19937_64 seeds_;
  RequestId next_request_id_;
  const RequestId request_id_stride_;
  bool stopping_ = false;
  std::thread thread_;

  mutable std::mutex stats_mutex_;  // guards the members below
  EngineStats stats_;
  std::optional<std::string> fault_;
};

EngineConfig Engine::Impl::resolve(EngineConfig c, const Model& model, Ops& ops, ExpertComm* group, CacheSizing& sizing) {
  const int64_t max_positions = model.config()->max_position_embeddings;
  if (c.max_model_len == 0) c.max_model_len = max_positions;
  // A sequence's cache holds max_model_len positions and the forward takes none past the model's
  // (SequenceCache): a longer max_model_len would fail every request's first step, so it is
  // refused here, as vLLM refuses one above the model's length.
  if (c.max_model_len < 0)
    throw UsageError("engine: max_model_len = " + std::to_string(c.max_model_len) +
                     " must not be negative (0: the model's max_position_embeddings)");
  if (c.max_model_len > max_positions)
    throw UsageError("engine: max_model_len = " + std::to_string(c.max_model_len) +
                     " is longer than the model's max_position_embeddings (" + std::to_string(max_positions) + ")");
  if (c.max_num_batched_tokens < 0)
    throw UsageError("engine: max_num_batched_tokens = " + std::to_string(c.max_num_batched_tokens) +
                     " must not be negative (0: the device's default)");
  if (c.max_num_batched_tokens == 0) {
    const std::optional<DeviceMemory> device = ops.device_memory();
    c.max_num_batched_tokens = default_max_num_batched_tokens(device ? device->total_bytes : 0);
  }
  if (c.block_size <= 0) throw UsageError("engine: block_size = " + std::to_string(c.block_size) + " must be positive");
  if (c.cache_memory_bytes < 0)
    throw UsageError("engine: cache_memory_bytes = " + std::to_string(c.cache_memory_bytes) + " must not be negative");
  if (!(c.gpu_memory_utilization >= 0.0 && c.gpu_memory_utilization <= 1.0))
    throw UsageError("engine: gpu_memory_utilization = " + std::to_string(c.gpu_memory_utilization) +
                     " must be in [0, 1] (0: not used)");
  if (c.exact_math && c.kv_cache_dtype == KvCacheDtype::kFp8)
    throw UsageError("engine: exact math keeps its caches in f32; fp8 caches go with the default numerics");
  if (c.kv_cache_dtype == KvCacheDtype::kAuto)
    c.kv_cache_dtype = !c.exact_math && auto_cache_dtype(ops, model.config()) == DType::kF8E4M3 ? KvCacheDtype::kFp8
                                                                                                 : KvCacheDtype::kBf16;
  check_cache_dtype(ops, model.config(), cache_dtype(c));
  if (c.enable_prefix_caching) c.shared_cache_pool = true;
  if (!c.enable_prefix_caching && c.prefix_snapshot_interval != 0)
    throw UsageError("engine: prefix_snapshot_interval = " + std::to_string(c.prefix_snapshot_interval) +
                     " (--prefix-snapshot-interval) stops prefills for prefix caching's snapshots, and prefix "
                     "caching is off (--no-enable-prefix-caching)");
  if (c.max_prefix_snapshots < 0)
    throw UsageError("engine: max_prefix_snapshots = " + std::to_string(c.max_prefix_snapshots) + " must not be negative");
  if (c.max_prefix_snapshots == 0) c.max_prefix_snapshots = 2 * c.max_num_seqs;
  // Blocks, else bytes, else the device's memory, else the longest requests.
  using Rule = CacheSizing::Rule;
  sizing.rule = c.num_cache_blocks != 0 ? Rule::kNumCacheBlocks
                : c.cache_memory_bytes > 0 ? Rule::kCacheMemoryBytes
                                           : Rule::kLongestRequests;
  if (sizing.rule == Rule::kLongestRequests && c.gpu_memory_utilization > 0) {
    if (const std::optional<GpuMemoryBudget> budget = measure_device_memory(c, model, ops, group)) {
      sizing.rule = Rule::kGpuMemoryUtilization;
      sizing.budget = *budget;
      c.cache_memory_bytes = cache_memory_from_utilization(*budget, cache_footprint(c, model));
    } else {
      sizing.no_device_memory = true;
    }
  }
  const int64_t blocks_per_sequence = (c.max_model_len + c.block_size - 1) / c.block_size;
  if (c.num_cache_blocks == 0 && c.cache_memory_bytes > 0) {
    const DType dtype = cache_dtype(c);
    const int64_t fixed = c.max_num_seqs * SequenceCache::fixed_bytes(model.config(), dtype);
    const int64_t per_block = CachePool::block_bytes(model.config(), dtype, c.block_size);
    c.num_cache_blocks = per_block > 0 ? std::max<int64_t>(0, c.cache_memory_bytes - fixed) / per_block
                                       : c.max_num_seqs * blocks_per_sequence;
    if (c.num_cache_blocks < blocks_per_sequence)
      throw UsageError("engine: " + std::to_string(c.cache_memory_bytes) + " bytes of cache hold " +
                       std::to_string(c.num_cache_blocks) + " blocks of " + std::to_string(c.block_size) +
                       " tokens after the fixed state of " + std::to_string(c.max_num_seqs) + " sequences (" +
                       std::to_string(fixed) + " bytes), fewer than one sequence of max_model_len = " +
                       std::to_string(c.max_model_len) + " needs (" + std::to_string(blocks_per_sequence) +
                       " blocks of " + std::to_string(per_block) + " bytes)");
  }
  if (c.num_cache_blocks == 0) c.num_cache_blocks = c.max_num_seqs * blocks_per_sequence;
  if (c.sampling_threads < 0)
    throw UsageError("engine: sampling_threads = " + std::to_string(c.sampling_threads) + " must not be negative");
  if (c.sampling_threads == 0) c.sampling_threads = default_sampling_threads();
  return c;
}

CacheFootprint Engine::Impl::cache_footprint(const EngineConfig& c, const Model& model) {
  const DType dtype = cache_dtype(c);
  return {c.max_num_seqs * SequenceCache::fixed_bytes(model.config(), dtype),
          CachePool::block_bytes(model.config(), dtype, c.block_size), c.block_size, c.max_model_len, c.max_num_seqs};
}

// What the caches' share of the device comes from (cache_sizing.h), measured as vLLM does before
// it makes its caches; nullopt where the backend has no device memory. The activations' peak is
// profiled, not estimated: the backend's high-water mark (Ops::device_memory) during one step of
// the largest kind the scheduler can make, max_num_batched_tokens tokens (as many as max_num_seqs
// sequences of max_model_len hold, if fewer), beyond what the backend held before it. The step
// differs from vLLM's in two ways that make it the largest: its sequences (the fewest that hold
// the tokens) end at max_model_len, since a chunk's scratch grows with the context before it (the
// indexer scores every compressed entry of it: tokens x max_model_len / 4 floats on the CUDA
// backend), and it takes every token's logits, as a step with a prompt_logprobs request does. The
// memory in use is measured after the step, so what the backend loads or keeps at its first
// forward (kernel modules, cuBLAS's state) counts. Not counted: the CUDA graphs of decode steps
// (cuda::CudaGraphForward keeps up to 8, each with its step's activations), which come out of the
// share left to the device, as in vLLM before it profiled graphs.
std::optional<GpuMemoryBudget> Engine::Impl::measure_device_memory(const EngineConfig& c, const Model& model, Ops& ops,
                                                                   ExpertComm* group) {
  const std::optional<DeviceMemory> loaded = ops.device_memory();
  if (!loaded) return std::nullopt;
  const ModelConfig& cfg = model.config();
  GpuMemoryBudget budget;
  budget.utilization = c.gpu_memory_utilization;
  budget.total_bytes = loaded->total_bytes;
  budget.used_bytes = loaded->total_bytes - loaded->free_bytes;
  if (c.enable_prefix_caching)
    budget.snapshot_bytes = (c.max_prefix_snapshots + c.max_num_seqs) * SequenceCache::snapshot_bytes(cfg, cache_dtype(c));
  // Refused before the step takes one sequence's caches when even without its activations there
  // is no room for them.
  cache_memory_from_utilization(budget, cache_footprint(c, model));

  const int64_t tokens = std::min(c.max_num_batched_tokens, c.max_num_seqs * c.max_model_len);
  std::vector<int32_t> ids(static_cast<size_t>(std::min(tokens, c.max_model_len)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(static_cast<int64_t>(i) % cfg->vocab_size);
  std::vector<SequenceCache> caches;
  caches.reserve(static_cast<size_t>((tokens + c.max_model_len - 1) / c.max_model_len));  // the batch points at them
  ForwardBatch batch;
  batch.options.exact_math = c.exact_math;
  batch.options.logits = LogitsFor::kAllTokens;
  batch.options.expert_group = group;  // every rank profiles at once (Engine's constructor)
  for (int64_t left = tokens; left > 0;) {
    const int64_t n = std::min(left, c.max_model_len);
    SequenceCache& cache = caches.emplace_back(model.new_sequence(ops, c.max_model_len, cache_dtype(c)));
    cache.advance(c.max_model_len - n);  // its entries are the zeros alloc gave: any values do
    batch.add(cache, std::span<const int32_t>(ids).first(static_cast<size_t>(n)));
    left -= n;
  }
  const DeviceMemory before = *ops.device_memory();  // the caches made; the peak's period starts
  model.forward(ops, batch);
  batch = {};
  caches.clear();
  const DeviceMemory after = *ops.device_memory();
  budget.activation_bytes = std::max<int64_t>(0, after.peak_backend_bytes - before.backend_bytes);
  budget.used_bytes = after.total_bytes - after.free_bytes;
  return budget;
}

SchedulerConfig Engine::Impl::scheduler_config(const EngineConfig& c, const Model& model) {
  SchedulerConfig s{c.max_model_len, c.max_num_seqs, c.max_num_batched_tokens, c.num_cache_blocks, c.block_size};
  s.long_prefill_token_threshold = c.long_prefill_token_threshold;
  if (c.enable_prefix_caching) {
    const ModelConfig& cfg = model.config();
    s.prefix_caching = true;
    s.prefix_alignment = c.block_size;  // a multiple of every ratio too, so no entry is split
    for (int64_t l = 0; l < cfg.num_layers(); ++l)
      if (const int64_t m = cfg.compress_ratio(l); m > 0) s.prefix_alignment = std::lcm(s.prefix_alignment, m);
    s.prefix_recompute_tokens = prefix_recompute_tokens(cfg);
    s.prefix_snapshot_interval = c.prefix_snapshot_interval;
  }
  return s;
}

// The shared pool: one page per cache block and ratio (SequenceCache::name_pages).
CachePool::PagesByRatio Engine::Impl::pool_pages() const {
  return CachePool::per_block(model_.config(), config_.num_cache_blocks, config_.block_size);
}

// With the shared pool the capacity costs no memory (the pages are the blocks'), only block table
// entries; every sequence gets max_model_len, so that all have one plan layout and a decode step's
// graph key depends on its slots alone (SequenceCache::graph_key).
SequenceCache Engine::Impl::slot_sequence() const {
  return model_.new_sequence(ops_, cache_pool_, config_.max_model_len, PageNaming::kNamedByBlocks, state_slots_);
}

SequenceCache Engine::Impl::new_sequence(int64_t tokens) const {
  if (!cache_pool_) return model_.new_sequence(ops_, tokens, cache_dtype(config_));
  SequenceCache cache = slot_sequence();
  // The slot holds its previous owner's rows, which no forward reads (model/state_slots.h).
  if (config_.kv_canary) state_slots_->poison(ops_, cache.slot());
  return cache;
}

// A CUDA graph records a decode step for the slots of its sequences in batch order
// (SequenceCache::graph_key); in slot order, a steady set of slots replays one graph whatever
// order the scheduler keeps its sequences in, and however they come and go. Each row of a step is
// computed on its own, so the order changes no bit.
void Engine::Impl::order_decode_by_slot(SchedulerStep& plan) const {
  if (!state_slots_ ||
      !std::all_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& c) { return c.num_tokens == 1; }))
    return;
  // A sequence without a cache yet (a one-token prompt) gets the lowest free slot as the batch is
  // made, after the held ones (compact_slots): last, in its order.
  const auto slot_of = [&](const ScheduledChunk& c) {
    const Request& r = requests_.at(c.sequence->id);
    return r.cache ? r.cache->slot() : std::numeric_limits<int32_t>::max();
  };
  std::stable_sort(plan.chunks.begin(), plan.chunks.end(),
                   [&](const ScheduledChunk& a, const ScheduledChunk& b) { return slot_of(a) < slot_of(b); });
}

// The engine's sequences hold slots 0..n-1 (n the caches it holds): then a decode step of all of
// them, the common case, has the same slots whichever requests they serve (each departure moves
// the last slot's state into the freed one, one copy of a slot's rows).
void Engine::Impl::compact_slots() {
  if (!state_slots_) return;
  const int64_t held = state_slots_->num_slots() - state_slots_->free_slots();
  for (auto& [id, r] : requests_)
    if (r.cache && r.cache->slot() >= held) r.cache->move_state(ops_, StateSlot(state_slots_));
}

std::vector<SequenceCache> Engine::Impl::pad_decode_batch(ForwardBatch& batch) const {
  std::vector<SequenceCache> padding;
  if (!state_slots_ || config_.runner == nullptr || !config_.runner->records_decode_steps() || config_.exact_math ||
      batch.options.logits != LogitsFor::kLastTokenOfSequence || !batch.one_token_each())
    return padding;
  const auto n = static_cast<int64_t>(batch.sequences.size());
  const int64_t pads = std::min(decode_batch_bucket(n) - n, state_slots_->free_slots());
  static constexpr int32_t kPadToken[1] = {0};
  padding.reserve(static_cast<size_t>(pads));  // batch keeps pointers to them
  for (int64_t i = 0; i < pads; ++i) {
    padding.push_back(slot_sequence());
    batch.add(padding.back(), kPadToken);
  }
  return padding;
}

// After a step that took every token's logits: the sampling row of each chunk (its last token's)
// into logits_, and the logprobs of the prompt tokens the chunks' logits predict.
void Engine::Impl::take_prompt_logprobs(const SchedulerStep& plan) {
  const int64_t V = model_.config()->vocab_size;
  logits_.resize(plan.chunks.size() * static_cast<size_t>(V));
  int64_t begin = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const auto row = [&](int64_t token) {
      return std::span<const float>(all_logits_).subspan(static_cast<size_t>((begin + token) * V), static_cast<size_t>(V));
    };
    const std::span<const float> last = row(c.num_tokens - 1);
    std::copy(last.begin(), last.end(), logits_.begin() + static_cast<std::ptrdiff_t>(i) * V);
    Request& r = requests_.at(c.sequence->id);
    if (r.prompt_logprobs && !r.prompt_logprobs_sent) {
      const Sequence& s = *c.sequence;
      r.prompt_token_logprobs.resize(static_cast<size_t>(s.num_prompt_tokens - 1));
      for (int64_t k = 0; k < c.num_tokens && c.start + k + 1 < s.num_prompt_tokens; ++k) {
        const int64_t next = c.start + k + 1;  // the prompt token this row predicts
        r.prompt_token_logprobs[static_cast<size_t>(next - 1)] =
            generated_token(token_logprobs(row(k), s.tokens[static_cast<size_t>(next)], *r.prompt_logprobs));
      }
    }
    begin += c.num_tokens;
  }
}

// After a step: a sequence that reached its prefill's snapshot point leaves a copy of its state
// there; one whose decode reached an aligned point keeps a copy for when it finishes.
void Engine::Impl::take_snapshots(const SchedulerStep& plan) {
  if (!config_.enable_prefix_caching) return;
  const int64_t align = scheduler_.config().prefix_alignment;
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence& s = *c.sequence;
    const bool prefill_point = scheduler_.snapshot_point(s, s.num_computed);
    const bool decode_point = c.samples() && s.num_computed > s.num_prompt_tokens && s.num_computed % align == 0;
    if (!prefill_point && !decode_point) continue;
    if (s.blocks.num_hashed * config_.block_size != s.num_computed)
      throw Error("engine: a sequence at the snapshot point " + std::to_string(s.num_computed) + " has " +
                  std::to_string(s.blocks.num_hashed) + " hashed blocks");
    const uint64_t key = s.blocks.last_hash;
    if (snapshot_index_.contains(key)) continue;
    Request& r = requests_.at(s.id);
    if (prefill_point)
      keep_snapshot(key, r.cache->snapshot(ops_));
    else
      r.decode_snapshot.emplace(key, r.cache->snapshot(ops_));
  }
}

// Keeps a state snapshot (unless one with the same tokens is kept already); the least recently
// used beyond the limit go.
void Engine::Impl::keep_snapshot(uint64_t key, StateSnapshot snapshot) {
  if (snapshot_index_.contains(key)) return;
  snapshots_.emplace_front(key, std::move(snapshot));
  snapshot_index_[key] = snapshots_.begin();
  scheduler_.add_snapshot(key);
  while (static_cast<int64_t>(snapshots_.size()) > config_.max_prefix_snapshots) {
    scheduler_.drop_snapshot(snapshots_.back().first);
    snapshot_index_.erase(snapshots_.back().first);
    snapshots_.pop_back();
  }
}

RequestHandle Engine::Impl::submit(GenerateRequest request) {
  const int64_t vocab = model_.config()->vocab_size;
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  for (auto ids : {std::span<const int32_t>(request.prompt), std::span<const int32_t>(request.stop.stop_token_ids)})
    for (int32_t id : ids)
      if (id < 0 || id >= vocab)
        throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  for (const auto& [id, bias] : request.sampling.logit_bias)
    if (id < 0 || id >= vocab)
      throw UsageError("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(vocab));
  for (const int32_t id : request.sampling.allowed_token_ids)
    if (id < 0 || id >= vocab)
      throw UsageError("allowed_token_ids: token id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(vocab));
  for (const std::vector<int32_t>& word : request.sampling.bad_words_ids)
    for (const int32_t id : word)
      if (id < 0 || id >= vocab)
        throw UsageError("bad_words: token id " + std::to_string(id) + " is outside the vocabulary of " +
                         std::to_string(vocab));
  request.sampling.validate();
  if (request.prompt_logprobs && (*request.prompt_logprobs < 0 || *request.prompt_logprobs > 20))
    throw UsageError("prompt_logprobs = " + std::to_string(*request.prompt_logprobs) + ": must be in [0, 20]");
  if (!request.stop.stop_strings.empty() && !tokenizer_)
    throw UsageError("stop strings need the engine's tokenizer, and this engine has none");
  if (request.format == OutputFormat::kJsonObject && !tokenizer_)
    throw UsageError("a JSON object output (response_format) needs the engine's tokenizer, and this engine has none");
  if (request.format == OutputFormat::kChoice && !tokenizer_)
    throw UsageError("a choice output (guided_choice) needs the engine's tokenizer, and this engine has none");
  if (request.choices && request.format != OutputFormat::kChoice)
    throw UsageError("a list of choices needs the choice output format");
  if (request.format == OutputFormat::kChoice) {
    if (!request.choices) throw UsageError("the choice output format needs a list of choices");
    ChoicePrefix::validate(*request.choices);
  }
  if (request.format == OutputFormat::kRegex && !tokenizer_)
    throw UsageError("a regex output (guided_regex) needs the engine's tokenizer, and this engine has none");
  if (request.regex && request.format != OutputFormat::kRegex)
    throw UsageError("a regex needs the regex output format");
  if (request.format == OutputFormat::kRegex && !request.regex)
    throw UsageError("the regex output format needs a compiled regex");
  if (request.json_schema && request.format != OutputFormat::kJsonObject)
    throw UsageError("a JSON schema needs the JSON object output format");
  for (const std::string& s : request.stop.stop_strings)
    if (s.empty()) throw UsageError("a stop string is empty");
  if (request.stop.min_tokens < 0)
    throw UsageError("min_tokens = " + std::to_string(request.stop.min_tokens) + " must not be negative");
  if (request.stop.min_tokens > 0 && request.format != OutputFormat::kText)
    throw UsageError("min_tokens cannot be combined with a constrained output (response_format, guided_choice, "
                     "guided_regex)");
  const int64_t max_new = request.stop.max_tokens.value_or(std::max<int64_t>(1, config_.max_model_len - prompt));
  if (request.stop.min_tokens > max_new)
    throw UsageError("min_tokens = " + std::to_string(request.stop.min_tokens) + " is more than max_tokens = " +
                     std::to_string(max_new));
  scheduler_.check_request(prompt, max_new);  // reads only the immutable config

  Submission s;
  s.arrival = EngineClock::now();
  s.max_new_tokens = max_new;
  {
    std::lock_guard lock(submit_mutex_);
    s.stream = std::make_shared<RequestStream>(next_request_id_, prompt);
    next_request_id_ += request_id_stride_;
    s.seed = request.sampling.seed.value_or(seeds_());
    s.request = std::move(request);
    incoming_.push_back(s);
  }
  wake_.notify_all();
  return RequestHandle(s.stream);
}

void Engine::Impl::take_submissions() {
  std::vector<Submission> taken;
  {
    std::lock_guard lock(submit_mutex_);
    taken.swap(incoming_);
  }
  for (Submission& s : taken) {
    Sequence& seq = scheduler_.add(std::move(s.request.prompt), s.max_new_tokens);
    Request r;
    r.stream = std::move(s.stream);
    r.sampling = s.request.sampling;
    r.stop = std::move(s.request.stop);
    r.seed = s.seed;
    r.sequence = &seq;
    if (tokenizer_) r.decoder.emplace(*tokenizer_);
    if (s.request.format == OutputFormat::kJsonObject) r.constraint = OutputConstraint::json_object(s.request.json_schema);
    if (s.request.format == OutputFormat::kChoice) r.constraint = OutputConstraint::choice(s.request.choices);
    if (s.request.format == OutputFormat::kRegex) r.constraint = OutputConstraint::regex(s.request.regex);
    r.prompt_logprobs = s.request.prompt_logprobs;
    seq.no_prefix_hit = r.prompt_logprobs.has_value();  // its whole prompt must run for them
    r.metrics.arrival = s.arrival;
    r.metrics.prompt_tokens = seq.num_prompt_tokens;
    counters_.prompt_tokens += static_cast<uint64_t>(seq.num_prompt_tokens);
    requests_.emplace(seq.id, std::move(r));
  }
}

std::vector<Engine::Impl::StepDraw> Engine::Impl::plan_draws(const SchedulerStep& plan) {
  const auto V = static_cast<size_t>(model_.config()->vocab_size);
  std::vector<StepDraw> draws;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    if (!c.samples()) continue;
    Request& r = requests_.at(c.sequence->id);
    StepDraw d;
    d.chunk = i;
    d.request = &r;
    d.sequence = c.sequence;
    if (r.constraint &&
        r.constraint->allowed_tokens(constraint_vocab(), static_cast<int32_t>(model_.config()->eos_token_id),
                                     !r.stop.ignore_eos, d.allowed) == 0) {
      d.dead_end = std::string(r.constraint->dead_end_message());
    } else if (!r.constraint && c.sequence->num_output() < r.stop.min_tokens) {
      // min_tokens: the tokens that would end the request may not be drawn yet.
      d.allowed.assign(V, 1);
      if (!r.stop.ignore_eos) d.allowed.at(static_cast<size_t>(model_.config()->eos_token_id)) = 0;
      for (const int32_t id : r.stop.stop_token_ids) d.allowed.at(static_cast<size_t>(id)) = 0;
    }
    // allowed_token_ids beside a mask: the two may leave no token (a choice none of the listed
    // tokens can spell, min_tokens holding back the only one listed). That is the request's
    // doing, so it ends here with an error, as a constraint's dead end does.
    if (d.dead_end.empty() && !d.allowed.empty() && !r.sampling.allowed_token_ids.empty() &&
        std::none_of(r.sampling.allowed_token_ids.begin(), r.sampling.allowed_token_ids.end(),
                     [&](int32_t id) { return d.allowed[static_cast<size_t>(id)] != 0; }))
      d.dead_end = "allowed_token_ids: none of its tokens may be output token " +
                   std::to_string(c.sequence->num_output()) +
                   " (the output format or min_tokens allows none of them there)";
    // bad_words can do the same: its ban may take the last tokens a mask or allowed_token_ids
    // leaves (or, in a tiny vocabulary, every token).
    if (d.dead_end.empty() && !r.sampling.bad_words_ids.empty() &&
        !any_token_drawable(V, d.allowed, r.sampling, history_of(*c.sequence).output))
      d.dead_end = "bad_words: no token is left for output token " + std::to_string(c.sequence->num_output()) +
                   " (it bans the last ones the output format, min_tokens or allowed_token_ids allows there)";
    draws.push_back(std::move(d));
  }
  return draws;
}

void Engine::Impl::draw_on_backend(std::vector<StepDraw>& draws, TensorView logits) {
  const int64_t n = logits.dim(0), V = logits.dim(1), W = (V + 31) / 32;
  draw_rows_.assign(static_cast<size_t>(n), DrawRow{});
  draw_edits_.clear();
  std::vector<int32_t> top_counts(static_cast<size_t>(n), 0), mask_rows;
  std::vector<uint32_t> mask_words;
  bool any_logprobs = false;
  for (const StepDraw& d : draws) {
    if (!d.on_backend) continue;
    const Request& r = *d.request;
    draw_rows_[d.chunk] = draw_row_of(r.sampling, r.seed, static_cast<uint64_t>(d.sequence->num_output()));
    const std::vector<LogitEdit> edits = draw_edits(d);
    draw_edits_.insert(draw_edits_.end(), edits.begin(), edits.end());
    if (!d.allowed.empty() || !r.sampling.allowed_token_ids.empty()) {
      std::vector<uint32_t> words(static_cast<size_t>(W), d.allowed.empty() ? ~0u : 0u);
      for (size_t j = 0; j < d.allowed.size(); ++j)
        if (d.allowed[j] != 0) words[j / 32] |= 1u << (j % 32);
      if (!r.sampling.allowed_token_ids.empty()) {
        std::vector<uint32_t> listed(static_cast<size_t>(W), 0);
        for (const int32_t id : r.sampling.allowed_token_ids) listed[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
        for (size_t w = 0; w < words.size(); ++w) words[w] &= listed[w];
      }
      mask_rows.push_back(static_cast<int32_t>(d.chunk));
      mask_words.insert(mask_words.end(), words.begin(), words.end());
    }
    if (r.sampling.logprobs) {
      any_logprobs = true;
      top_counts[d.chunk] = r.sampling.top_logprobs;
    }
  }
  // Logprobs are the raw logits': a copy keeps them when edits or masks change the rows.
  DeviceTensor raw;
  ConstTensorView raw_logits = logits;
  if (any_logprobs && (!draw_edits_.empty() || !mask_rows.empty())) {
    raw = ops_.alloc_output(DType::kF32, logits.shape());
    ops_.copy({logits, raw.view()});
    raw_logits = raw.view();
  }
  if (!draw_edits_.empty()) {
    const DeviceTensor edits = upload_words(ops_, draw_edits_, DType::kI32,
                                            {static_cast<int64_t>(draw_edits_.size()), sizeof(LogitEdit) / sizeof(int32_t)});
    ops_.edit_logits({logits, edits.view()});
  }
  if (!mask_rows.empty()) {
    const auto M = static_cast<int64_t>(mask_rows.size());
    const DeviceTensor allowed = upload_words(ops_, mask_words, DType::kI32, {M, W});
    const DeviceTensor rows = upload_words(ops_, mask_rows, DType::kI32, {M});
    ops_.mask_logits({logits, allowed.view(), rows.view()});
  }
  const DeviceTensor rows = upload_words(ops_, draw_rows_, DType::kI64, {n, sizeof(DrawRow) / sizeof(int64_t)});
  DeviceTensor ids = ops_.alloc_output(DType::kI32, {n});
  ops_.sample_rows({logits, rows.view(), ids.view()});
  const std::vector<int32_t> drawn = download_words<int32_t>(ops_, ids);
  for (StepDraw& d : draws) {
    if (!d.on_backend) continue;
    d.choice.id = drawn[d.chunk];
    if (d.choice.id < 0) d.error = "no token has a probability (the logits have no finite largest value)";
  }
  if (!any_logprobs) return;
  const int64_t N = std::max<int64_t>(1, *std::max_element(top_counts.begin(), top_counts.end()));
  const DeviceTensor counts = upload_words(ops_, top_counts, DType::kI32, {n});
  DeviceTensor logprob = ops_.alloc_output(DType::kF32, {n}), rank = ops_.alloc_output(DType::kI32, {n});
  DeviceTensor top_ids = ops_.alloc_output(DType::kI32, {n, N}), top_logprobs = ops_.alloc_output(DType::kF32, {n, N});
  ops_.row_logprobs({raw_logits, ids.view(), counts.view(), logprob.view(), rank.view(), top_ids.view(), top_logprobs.view()});
  const std::vector<float> logprob_host = download_words<float>(ops_, logprob);
  const std::vector<float> top_logprobs_host = download_words<float>(ops_, top_logprobs);
  const std::vector<int32_t> rank_host = download_words<int32_t>(ops_, rank);
  const std::vector<int32_t> top_ids_host = download_words<int32_t>(ops_, top_ids);
  for (StepDraw& d : draws) {
    if (!d.on_backend || !d.request->sampling.logprobs) continue;
    d.choice.logprob = logprob_host[d.chunk];
    d.choice.rank = rank_host[d.chunk];
    for (int64_t j = 0; j < N; ++j) {
      const size_t at = d.chunk * static_cast<size_t>(N) + static_cast<size_t>(j);
      if (top_ids_host[at] >= 0) d.choice.top.emplace_back(top_ids_host[at], top_logprobs_host[at]);
    }
  }
}

bool Engine::Impl::step() {
  take_submissions();
  std::vector<SequenceId> cancelled;
  for (auto& [id, r] : requests_)
    if (r.stream->cancel_requested) cancelled.push_back(id);
  for (SequenceId id : cancelled) end_early(requests_.at(id), FinishReason::kCancelled, "");

  // With a group: whether this step's forward, and so its exchanges, began and whether it returned.
  bool forwarded = false, forward_returned = false;
  if (scheduler_.has_work()) {
    SchedulerStep plan = scheduler_.schedule();
    for (SequenceId id : plan.preempted) requests_.at(id).cache.reset();
    compact_slots();
    order_decode_by_slot(plan);
    if (config_.kv_canary && cache_pool_ && !plan.new_blocks.empty())
      for (const auto& [ratio, pages] : cache_pool_->pages()) cache_pool_->poison(ops_, ratio, plan.new_blocks);
    if (!plan.chunks.empty()) {
      const int64_t V = model_.config()->vocab_size, n = static_cast<int64_t>(plan.chunks.size());
      ForwardBatch batch;
      batch.options.exact_math = config_.exact_math;
      batch.options.expert_group = group_;
      // A chunk of a prompt whose logprobs were asked for needs every token's logits: then the
      // step takes them all and picks the sampling rows on the host.
      const bool all_logits = std::any_of(plan.chunks.begin(), plan.chunks.end(), [&](const ScheduledChunk& c) {
        const Request& r = requests_.at(c.sequence->id);
        return r.prompt_logprobs && !r.prompt_logprobs_sent && c.start + 1 < c.sequence->num_prompt_tokens;
      });
      batch.options.logits = all_logits ? LogitsFor::kAllTokens : LogitsFor::kLastTokenOfSequence;
      // The step's draws: what each needs (a constrained request's mask, made here in order; a
      // dead end ends its request instead), then the draws, on the backend (sample_token's draws,
      // the same tokens; only ids and logprobs come back) unless the step takes every token's
      // logits or sample_on_backend is off, else on the host's sampling pool over their rows of
      // logits (sample_token is stateless: the same tokens whatever the thread count), then the
      // tokens appended and emitted in order.
      std::vector<StepDraw> draws = plan_draws(plan);
      bool any_backend_draw = false, any_host_draw = false;
      std::vector<uint8_t> host_row(static_cast<size_t>(n), 0);
      for (StepDraw& d : draws) {
        if (!d.dead_end.empty()) continue;
        d.on_backend = config_.sample_on_backend && !all_logits;
        (d.on_backend ? any_backend_draw : any_host_draw) = true;
        host_row[d.chunk] = !d.on_backend;
      }
      try {
        for (const ScheduledChunk& c : plan.chunks) {
          Request& r = requests_.at(c.sequence->id);
          if (!r.cache) {
            r.cache.emplace(new_sequence(c.sequence->max_tokens));
            if (c.sequence->resume_snapshot) {
              const auto it = snapshot_index_.at(*c.sequence->resume_snapshot);
              snapshots_.splice(snapshots_.begin(), snapshots_, it);
              r.cache->resume_on_snapshot(ops_, it->second);
            } else if (c.start > 0) {
              r.cache->resume_on_prefix(c.start, c.sequence->reused_tokens);
            }
          }
          if (cache_pool_) r.cache->name_pages(c.sequence->blocks.blocks, config_.block_size);
          batch.add(*r.cache, std::span<const int32_t>(c.sequence->tokens)
                                  .subspan(static_cast<size_t>(c.start), static_cast<size_t>(c.num_tokens)));
        }
        const std::vector<SequenceCache> padding = pad_decode_batch(batch);
        forwarded = true;
        const ForwardResult result =
            config_.runner != nullptr ? config_.runner->forward(model_, ops_, batch) : model_.forward(ops_, batch);
        forward_returned = true;
        // The padding's rows come last (one each).
        const TensorView logits =
            slice_rows(result.logits.view(), 0, result.logits.dim(0) - static_cast<int64_t>(padding.size()));
        if (any_backend_draw) draw_on_backend(draws, logits);
        if (all_logits) {
          const int64_t T = batch.num_tokens();
          all_logits_.resize(static_cast<size_t>(T * V));
          ops_.download(logits, host_view(all_logits_.data(), DType::kF32, {T, V}));
          take_prompt_logprobs(plan);
        } else if (any_host_draw) {
          // The host draws' rows (edits and masks touched only backend rows), in runs of
          // consecutive rows.
          logits_.resize(static_cast<size_t>(n * V));
          for (int64_t begin = 0; begin < n;) {
            if (!host_row[static_cast<size_t>(begin)]) {
              ++begin;
              continue;
            }
            int64_t end = begin + 1;
            while (end < n && host_row[static_cast<size_t>(end)]) ++end;
            ops_.download(slice_rows(logits, begin, end),
                          host_view(logits_.data() + begin * V, DType::kF32, {end - begin, V}));
            begin = end;
          }
        }
      } catch (const std::exception& e) {
        // A cache that could not be made, or a forward that failed and left its caches in an
        // unknown state: the step's requests fail, the others go on. A rank whose forward failed
        // gives its expert group up, so that the other ranks fail their steps rather than wait
        // for its exchanges; one that failed before its forward still makes the step's exchanges.
        if (group_ != nullptr && forwarded && !forward_returned) {
          const std::string why = "rank " + std::to_string(group_->rank()) + "'s forward failed: " + e.what();
          group_->abort(why);
          note_fault(why);
        }
        for (const ScheduledChunk& c : plan.chunks)
          end_early(requests_.at(c.sequence->id), FinishReason::kError, std::string("the step failed: ") + e.what());
        if (!forwarded) serve_experts_without_tokens();
        publish_stats();
        return !requests_.empty();
      }
      scheduler_.complete(plan);
      take_snapshots(plan);
      counters_.computed_tokens += static_cast<uint64_t>(batch.num_tokens());
      for (const ScheduledChunk& c : plan.chunks)
        counters_.prompt_tokens_computed += static_cast<uint64_t>(
            std::max<int64_t>(0, std::min(c.start + c.num_tokens, c.sequence->num_prompt_tokens) - c.start));
      const EngineClock::time_point now = EngineClock::now();
      sampling_pool_.parallel_for(static_cast<int64_t>(draws.size()), [&](int64_t k) {
        StepDraw& d = draws[static_cast<size_t>(k)];
        if (d.on_backend || !d.dead_end.empty()) return;
        try {
          d.choice = sample_token(std::span<const float>(logits_).subspan(d.chunk * static_cast<size_t>(V), static_cast<size_t>(V)),
                                  d.request->sampling, d.request->seed, history_of(*d.sequence), d.allowed);
        } catch (const Error& e) {
          d.error = e.what();
        }
      });
      std::vector<SequenceId> finished;
      for (StepDraw& d : draws) {
        if (!d.dead_end.empty()) {
          end_early(*d.request, FinishReason::kError, d.dead_end);
          continue;
        }
        if (!d.error.empty()) {  // logits no token can be drawn from (NaN or infinite): this request fails alone
          end_early(*d.request, FinishReason::kError, "sampling failed: " + d.error);
          continue;
        }
        scheduler_.append_token(*plan.chunks[d.chunk].sequence, d.choice.id);
        emit(*d.request, d.choice, now, finished);
      }
      for (SequenceId id : finished) requests_.erase(id);
    }
    ++counters_.steps;
    counters_.preemptions = scheduler_.num_preemptions();
    counters_.prefix_cache_queries = scheduler_.prefix_queried_tokens();
    counters_.prefix_cache_hits = scheduler_.prefix_hit_tokens();
  }
  if (!forwarded) serve_experts_without_tokens();
  publish_stats();
  std::lock_guard lock(submit_mutex_);
  return !requests_.empty() || !incoming_.empty();
}

void Engine::Impl::serve_experts_without_tokens() {
  if (group_ == nullptr) return;
  try {
    model_.forward_without_tokens(ops_, *group_, config_.exact_math);
  } catch (const CommError& e) {
    note_fault(e.what());
  }
}

void Engine::Impl::emit(Request& r, const TokenChoice& choice, EngineClock::time_point now,
                        std::vector<SequenceId>& finished) {
  Sequence& seq = *r.sequence;
  OutputChunk chunk;
  chunk.time = now;
  chunk.tokens.push_back(generated_token(choice));
  if (r.prompt_logprobs && !r.prompt_logprobs_sent) {
    chunk.prompt_logprobs = std::move(r.prompt_token_logprobs);
    r.prompt_logprobs_sent = true;
  }
  if (r.metrics.completion_tokens == 0) r.metrics.first_token = now;
  ++r.metrics.completion_tokens;
  ++counters_.generation_tokens;

  if (r.constraint) r.constraint->advance(constraint_vocab().bytes(choice.id));  // the mask let only such tokens through
  const bool eos = !r.stop.ignore_eos && choice.id == model_.config()->eos_token_id;
  if (eos || std::find(r.stop.stop_token_ids.begin(), r.stop.stop_token_ids.end(), choice.id) != r.stop.stop_token_ids.end()) {
    chunk.finish = FinishReason::kStop;  // the stopping token adds no text
    chunk.stop_token_id = choice.id;
  } else if (r.decoder && choice.id < tokenizer_->vocab_size()) {  // ids the tokenizer lacks add no text
    const size_t before = r.text.size();
    r.text += r.decoder->next(choice.id);
    size_t first = std::string::npos;
    const bool may_stop = seq.num_output() >= r.stop.min_tokens;  // min_tokens
    for (const std::string& s : r.stop.stop_strings) {
      if (!may_stop) break;
      const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
      const size_t at = r.text.find(s, from);
      if (at < first) {
        first = at;
        chunk.stop_string = s;
      }
    }
    if (first != std::string::npos) {
      r.text.resize(first + (r.stop.include_stop_string ? chunk.stop_string.size() : 0));
      chunk.finish = FinishReason::kStop;
    }
  }
  if (!chunk.finish && r.constraint && r.constraint->finished()) chunk.finish = FinishReason::kStop;
  if (!chunk.finish && seq.num_output() >= seq.max_tokens - seq.num_prompt_tokens) chunk.finish = FinishReason::kLength;

  if (r.decoder && chunk.finish && chunk.stop_string.empty()) r.text += r.decoder->flush();
  const size_t end = chunk.finish ? r.text.size() : r.text.size() - stop_string_holdback(r);
  if (end > r.text_sent) {
    chunk.text = r.text.substr(r.text_sent, end - r.text_sent);
    r.text_sent = end;
  }
  if (chunk.finish) {
    if (r.decode_snapshot) keep_snapshot(r.decode_snapshot->first, std::move(r.decode_snapshot->second));
    finalize(r, chunk);
    const SequenceId id = seq.id;
    scheduler_.finish(id);  // destroys seq
    finished.push_back(id);
  }
  r.stream->push(std::move(chunk));
}

// The longest end of the unsent text that is the start of a stop string.
size_t Engine::Impl::stop_string_holdback(const Request& r) const {
  const std::string_view unsent = std::string_view(r.text).substr(r.text_sent);
  size_t hold = 0;
  for (const std::string& s : r.stop.stop_strings)
    for (size_t k = std::min(unsent.size(), s.size() - 1); k > hold; --k)
      if (unsent.substr(unsent.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
  return hold;
}

// The vocabulary as the JSON, choice and regex constraints see it: the bytes of the tokenizer's vocabulary
// tokens; added and special tokens, and ids the tokenizer lacks, are never allowed (end of sequence
// is added by the choice and regex constraints when the text is a choice or a match).
const JsonTokenMask& Engine::Impl::constraint_vocab() {
  if (!constraint_vocab_) {
    const int32_t vocab = static_cast<int32_t>(model_.config()->vocab_size);
    std::vector<std::string> bytes(static_cast<size_t>(vocab));
    for (int32_t id = 0; id < std::min(vocab, tokenizer_->vocab_size()); ++id)
      if (tokenizer_->token_kind(id) == Tokenizer::TokenKind::kVocabulary)
        bytes[static_cast<size_t>(id)] = tokenizer_->token_bytes(id);
    constraint_vocab_.emplace(bytes);
  }
  return *constraint_vocab_;
}

// Ends a request outside the sampling path (cancelled, failed, engine shut down).
void Engine::Impl::end_early(Request& r, FinishReason reason, const std::string& error) {
  OutputChunk last;
  last.time = EngineClock::now();
  last.finish = reason;
  last.error = error;
  if (r.decoder) r.text += r.decoder->flush();
  last.text = r.text.substr(r.text_sent);
  finalize(r, last);
  const SequenceId id = r.sequence->id;
  r.stream->push(std::move(last));
  scheduler_.finish(id);
  requests_.erase(id);
}

void Engine::Impl::finalize(Request& r, OutputChunk& last) {
  r.metrics.finished = last.time;
  r.metrics.preemptions = r.sequence->num_preemptions;
  r.metrics.cached_tokens = r.sequence->num_cached_tokens;
  if (r.metrics.completion_tokens == 0) r.metrics.first_token = last.time;
  last.metrics = r.metrics;
  ++counters_.requests_finished;
  if (*last.finish == FinishReason::kCancelled) ++counters_.requests_cancelled;
  if (*last.finish == FinishReason::kError) ++counters_.requests_failed;
  if (r.metrics.completion_tokens > 0) {
    counters_.time_to_first_token_s_sum += r.metrics.time_to_first_token_s();
    ++counters_.time_to_first_token_count;
  }
  if (r.metrics.completion_tokens > 1) {
    counters_.time_per_output_token_s_sum += r.metrics.time_per_output_token_s();
    ++counters_.time_per_output_token_count;
  }
  counters_.end_to_end_s_sum += r.metrics.end_to_end_s();
}

void Engine::Impl::publish_stats() {
  EngineStats s = counters_;
  s.running = scheduler_.num_running();
  s.waiting = scheduler_.num_waiting();
  s.cache_blocks_total = scheduler_.blocks().num_blocks();
  s.cache_blocks_used = s.cache_blocks_total - scheduler_.blocks().num_free();
  s.cache_blocks_cached = scheduler_.blocks().num_cached();
  if (state_slots_) s.state_slots_used = state_slots_->num_slots() - state_slots_->free_slots();
  s.prefix_snapshots = static_cast<int64_t>(snapshots_.size());
  for (const auto& [key, snapshot] : snapshots_) s.prefix_snapshot_bytes += snapshot.bytes();
  std::lock_guard lock(stats_mutex_);
  stats_ = s;
}

void Engine::Impl::start() {
  std::lock_guard lock(submit_mutex_);
  if (thread_.joinable()) throw UsageError("engine: the engine thread is already running");
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Engine::Impl::stop() {
  {
    std::lock_guard lock(submit_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::Impl::loop() {
  bool busy = true;
  for (;;) {
    {
      std::unique_lock lock(submit_mutex_);
      if (!busy) wake_.wait(lock, [this] { return stopping_ || !incoming_.empty(); });
      if (stopping_) return;
    }
    busy = step();
  }
}

class Engine::Lockstep {
 public:
  explicit Lockstep(int ranks) : threads(ranks) {}
  RankThreads threads;
  std::mutex mutex;  // guards the members below
  std::condition_variable wake;
  bool submitted = false;  // a request came since the engine thread last looked
  bool stopping = false;
  std::thread thread;
};

namespace {

// UsageError unless `ranks` are one expert group's ranks in order over models of one config.
void check_ranks(std::span<const EngineRank> ranks, const EngineConfig& config) {
  if (ranks.empty()) throw UsageError("engine: no rank to run on");
  const auto n = static_cast<int>(ranks.size());
  for (int r = 0; r < n; ++r) {
    const EngineRank& rank = ranks[static_cast<size_t>(r)];
    const std::string name = "engine: rank " + std::to_string(r) + " of " + std::to_string(n);
    if (rank.model == nullptr || rank.ops == nullptr) throw UsageError(name + " has no model or no backend");
    if (n == 1 && rank.expert_group == nullptr) continue;
    if (rank.expert_group == nullptr || rank.expert_group->size() != n || rank.expert_group->rank() != r)
      throw UsageError(name + " needs rank " + std::to_string(r) + " of an expert group of " + std::to_string(n) +
                       (rank.expert_group == nullptr ? std::string(", not none")
                                                     : ", not rank " + std::to_string(rank.expert_group->rank()) +
                                                           " of " + std::to_string(rank.expert_group->size())));
    const ModelParams& mine = rank.model->config().params();
    const ModelParams& first = ranks[0].model->config().params();
    if (mine.vocab_size != first.vocab_size || mine.num_hidden_layers != first.num_hidden_layers ||
        mine.hidden_size != first.hidden_size || mine.n_routed_experts != first.n_routed_experts)
      throw UsageError(name + "'s model is not rank 0's (vocab_size, num_hidden_layers, hidden_size or n_routed_experts differ)");
  }
  if (n > 1 && config.runner != nullptr)
    throw UsageError("engine: " + std::to_string(n) + " data-parallel ranks run their steps eagerly, without a ForwardRunner");
}

// The sum of the ranks' stats. EngineStats is all counts and sums, so each field adds.
EngineStats add_stats(EngineStats a, const EngineStats& b) {
  static_assert(sizeof(EngineStats) == 24 * 8, "a field added to EngineStats must be summed here");
  a.running += b.running;
  a.waiting += b.waiting;
  a.cache_blocks_total += b.cache_blocks_total;
  a.cache_blocks_used += b.cache_blocks_used;
  a.cache_blocks_cached += b.cache_blocks_cached;
  a.state_slots_used += b.state_slots_used;
  a.prefix_snapshots += b.prefix_snapshots;
  a.prefix_snapshot_bytes += b.prefix_snapshot_bytes;
  a.steps = std::max(a.steps, b.steps);  // the ranks step together: one engine step each
  a.prompt_tokens += b.prompt_tokens;
  a.generation_tokens += b.generation_tokens;
  a.computed_tokens += b.computed_tokens;
  a.prompt_tokens_computed += b.prompt_tokens_computed;
  a.preemptions += b.preemptions;
  a.prefix_cache_queries += b.prefix_cache_queries;
  a.prefix_cache_hits += b.prefix_cache_hits;
  a.requests_finished += b.requests_finished;
  a.requests_cancelled += b.requests_cancelled;
  a.requests_failed += b.requests_failed;
  a.time_to_first_token_s_sum += b.time_to_first_token_s_sum;
  a.time_to_first_token_count += b.time_to_first_token_count;
  a.time_per_output_token_s_sum += b.time_per_output_token_s_sum;
  a.time_per_output_token_count += b.time_per_output_token_count;
  a.end_to_end_s_sum += b.end_to_end_s_sum;
  return a;
}

}  // namespace

Engine::Engine(const Model& model, Ops& ops, EngineConfig config, std::shared_ptr<const Tokenizer> tokenizer)
    : Engine(std::span<const EngineRank>(std::vector<EngineRank>{{&model, &ops, nullptr}}), config, std::move(tokenizer)) {}

Engine::Engine(std::span<const EngineRank> ranks, EngineConfig config, std::shared_ptr<const Tokenizer> tokenizer) {
  check_ranks(ranks, config);
  const auto n = static_cast<int>(ranks.size());
  if (n == 1) {
    ranks_.push_back(std::make_unique<Impl>(*ranks[0].model, *ranks[0].ops, config, std::move(tokenizer),
                                            ranks[0].expert_group, 0, 1));
    return;
  }
  lockstep_ = std::make_unique<Lockstep>(n);
  ranks_.resize(ranks.size());
  // Each rank on its thread, together: with gpu_memory_utilization a rank's profile step exchanges
  // with the others. A rank that cannot start gives the group up, so the others fail too. The
  // thread binds the rank's backend first, once: a rank keeps its thread for every step.
  lockstep_->threads.run([&](int r) {
    const EngineRank& rank = ranks[static_cast<size_t>(r)];
    rank.ops->bind_thread();
    try {
      ranks_[static_cast<size_t>(r)] =
          std::make_unique<Impl>(*rank.model, *rank.ops, config, tokenizer, rank.expert_group, r, n);
    } catch (const std::exception& e) {
      rank.expert_group->abort("rank " + std::to_string(r) + " could not start: " + e.what());
      throw;
    }
  });
}

Engine::~Engine() { stop(); }

std::optional<std::string> Engine::fault() const {
  for (const std::unique_ptr<Impl>& rank : ranks_)
    if (std::optional<std::string> why = rank->fault()) return why;
  return std::nullopt;
}

RequestHandle Engine::submit(GenerateRequest request) {
  if (!lockstep_) return ranks_[0]->submit(std::move(request));
  if (const std::optional<std::string> why = fault()) throw CommError("the engine cannot serve: " + *why);
  size_t least = 0;
  int64_t least_open = ranks_[0]->open_requests();
  for (size_t r = 1; r < ranks_.size(); ++r)
    if (const int64_t open = ranks_[r]->open_requests(); open < least_open) {
      least = r;
      least_open = open;
    }
  RequestHandle handle = ranks_[least]->submit(std::move(request));
  {
    std::lock_guard lock(lockstep_->mutex);
    lockstep_->submitted = true;
  }
  lockstep_->wake.notify_all();
  return handle;
}

void Engine::start() {
  if (!lockstep_) return ranks_[0]->start();
  std::lock_guard lock(lockstep_->mutex);
  if (lockstep_->thread.joinable()) throw UsageError("engine: the engine thread is already running");
  lockstep_->stopping = false;
  lockstep_->thread = std::thread([this] {
    bool busy = true;
    for (;;) {
      {
        std::unique_lock wait(lockstep_->mutex);
        if (!busy) lockstep_->wake.wait(wait, [this] { return lockstep_->stopping || lockstep_->submitted; });
        if (lockstep_->stopping) return;
        lockstep_->submitted = false;
      }
      busy = step_ranks_together();
    }
  });
}

void Engine::stop() {
  if (!lockstep_) return ranks_[0]->stop();
  {
    std::lock_guard lock(lockstep_->mutex);
    lockstep_->stopping = true;
  }
  lockstep_->wake.notify_all();
  if (lockstep_->thread.joinable()) lockstep_->thread.join();
}

bool Engine::step() { return lockstep_ ? step_ranks_together() : ranks_[0]->step(); }

bool Engine::step_ranks_together() {
  std::vector<char> busy(ranks_.size(), 0);
  lockstep_->threads.run([&](int r) { busy[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->step(); });
  return std::any_of(busy.begin(), busy.end(), [](char b) { return b != 0; });
}

const EngineConfig& Engine::config() const { return ranks_[0]->config(); }
const CacheSizing& Engine::cache_sizing() const { return ranks_[0]->cache_sizing(); }
int64_t Engine::cache_bytes() const { return ranks_[0]->cache_bytes(); }

EngineStats Engine::stats() const {
  EngineStats sum = ranks_[0]->stats();
  for (size_t r = 1; r < ranks_.size(); ++r) sum = add_stats(sum, ranks_[r]->stats());
  return sum;
}

int default_sampling_threads() {
  return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 16));
}

int64_t decode_batch_bucket(int64_t n) { return n <= 8 ? n : (n + 7) / 8 * 8; }

int64_t default_max_num_batched_tokens(int64_t device_total_bytes) {
  constexpr int64_t kLargeDevice = int64_t{70} << 30;
  return device_total_bytes >= kLargeDevice ? 8192 : 2048;
}

}  // namespace dsv4
