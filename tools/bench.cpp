// `dsv4 bench layers`: times one layer of each kind (SWA, CSA, HCA) of a model's geometry with
// dummy weights, for a long prefill and for decode steps of several batch sizes at a given
// context, and prints each time beside its floor: the bytes a decode step must move at the
// measured copy rate, or the FLOPs of a prefill at the measured GEMM rates (ENV.md).
// `dsv4 bench step`: the whole model (every layer and the head) the same way, a prefill of the
// context and then whole decode steps, with layers of one kind sharing their weights.
// `bench throughput` (bench_throughput.cpp), `bench sampling` (bench_sampling.cpp) and `bench
// serve` (bench_serve.cpp) are registered beside them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "kv/packed_entries.h"
#include "model/cache_pool.h"
#include "model/model.h"
#include "ops/profiling_ops.h"
#include "runtime/rank_threads.h"
#include "tools/backend.h"
#include "tools/commands.h"
#include "tools/engine_ranks.h"
#include "tools/json_file.h"
#include "tools/model_source.h"
#include "tools/number_checks.h"

namespace dsv4::tools {

namespace {

// The H200's measured ceilings (../shared/design/ENV.md, "Measured GPU ceilings").
constexpr double kCopyBytesPerSecond = 4.28e12;
constexpr double kReadBytesPerSecond = 4.43e12;  // read-only streaming: what a decode step does
constexpr double kFp8GemmFlops = 1314e12;  // cuBLASLt, DeepSeek block scales, 8192^3
constexpr double kBf16GemmFlops = 792e12;  // cuBLASLt, 8192^3
// Bytes per cache entry of the packed layouts `--kv-cache-dtype fp8` keeps (docs/MODEL.md §8.1,
// §8.3): the 584-byte FP8 attention entry and the 68-byte MXFP4 indexer key (until session 38 the
// floors counted vLLM's 132-byte FP8 key, 0.2% of a batch-64 step's bytes more).
constexpr double kKvEntryBytes = Fp8CacheLayout::kEntryBytes;
constexpr double kIndexKeyBytes = Mxfp4KeyLayout::kEntryBytes;

struct BenchOptions {
  ModelSource source{"flash", LoadFormat::kDummy, 0};  // always dummy weights
  Device device = Device::kCpu;
  int64_t context = 8192;
  std::vector<int64_t> batches = {1, 16, 64};
  int64_t iters = 20;
  int64_t repeats = 3;
  std::string json_file;
  int threads = 0;
  bool profile = false;
  int64_t prefill_chunk = 8192;  // bench step: tokens per forward of the prefill
  std::vector<int64_t> prefill_lengths;  // bench step: more prefills, each of a new sequence
  std::string kv_cache_dtype = "auto";    // bench step: auto, bf16 or fp8 (--kv-cache-dtype)
  GpuOptions gpu;
};

// One layer of each kind the model has, in the order swa, csa, hca; the first is hash-routed when
// the model hashes any layer (as V4's first layers are), the others score-routed.
ModelConfig one_layer_per_kind(const ModelConfig& full) {
  ModelParams p = full.params();
  p.compress_ratios.clear();
  for (const auto& [kind, ratio] : {std::pair{LayerKind::kSwa, 0}, {LayerKind::kCsa, 4}, {LayerKind::kHca, 128}})
    if (full.count_layers(kind) > 0) p.compress_ratios.push_back(ratio);
  p.num_hidden_layers = static_cast<int64_t>(p.compress_ratios.size());
  p.num_nextn_predict_layers = 0;
  p.num_hash_layers = std::min<int64_t>(p.num_hash_layers, 1);
  return ModelConfig(p, full.source() + ", one layer per kind");
}

// What one layer moves and computes, from its loaded weights and the cache geometry.
struct LayerCost {
  double fixed_bytes = 0;        // attention, compressor, indexer, gate, shared expert, norms, mHC
  double expert_bytes = 0;       // one routed expert
  double linear_flops_per_token = 0;
};

double weight_bytes(const Weight& w) {
  double b = static_cast<double>(w.data.view().nbytes());
  if (!w.scale.empty()) b += static_cast<double>(w.scale.view().nbytes());
  if (!w.aux.empty()) b += static_cast<double>(w.aux.view().nbytes());
  return b;
}

// 2 N K for a linear [N, K].
double linear_flops(const Weight& w) { return w.shape.size() == 2 ? 2.0 * static_cast<double>(w.shape[0] * w.shape[1]) : 0.0; }

LayerCost layer_cost(const ModelConfig& cfg, const LayerWeights& w) {
  LayerCost c;
  const auto add_fixed = [&](const Weight& x, bool per_token_linear) {
    c.fixed_bytes += weight_bytes(x);
    if (per_token_linear) c.linear_flops_per_token += linear_flops(x);
  };
  for (const Weight* x : {&w.attn_norm, &w.ffn_norm, &w.hc_attn.fn, &w.hc_attn.base, &w.hc_attn.scale, &w.hc_ffn.fn,
                          &w.hc_ffn.base, &w.hc_ffn.scale, &w.attn.q_norm, &w.attn.kv_norm, &w.attn.attn_sink})
    add_fixed(*x, false);
  for (const Weight* x : {&w.attn.wq_a, &w.attn.wq_b, &w.attn.wkv, &w.attn.wo_a, &w.attn.wo_b, &w.ffn.gate})
    add_fixed(*x, true);
  const auto add_compressor = [&](const CompressorWeights& cw) {
    add_fixed(cw.wkv, true);
    add_fixed(cw.wgate, true);
    add_fixed(cw.ape, false);
    add_fixed(cw.norm, false);
  };
  if (w.attn.compressor) add_compressor(*w.attn.compressor);
  if (w.attn.indexer) {
    add_fixed(w.attn.indexer->wq_b, true);
    add_fixed(w.attn.indexer->weights_proj, true);
    add_compressor(w.attn.indexer->compressor);
  }
  for (const Weight* x : {&w.ffn.shared.w1, &w.ffn.shared.w2, &w.ffn.shared.w3}) add_fixed(*x, true);
  const ExpertLinears& e = w.ffn.experts.at(0);
  c.expert_bytes = weight_bytes(e.w1) + weight_bytes(e.w2) + weight_bytes(e.w3);
  c.linear_flops_per_token += static_cast<double>(cfg->num_experts_per_tok) * (linear_flops(e.w1) + linear_flops(e.w2) + linear_flops(e.w3));
  return c;
}

// Keys a query at position p attends to, and the indexer entries it scores (MODEL.md §3.5, §5).
struct Visible {
  double keys = 0;
  double indexed = 0;
};

Visible visible_at(const ModelConfig& cfg, int64_t ratio, int64_t p) {
  Visible v;
  v.keys = static_cast<double>(std::min<int64_t>(cfg->sliding_window, p + 1));
  if (ratio == 4) {
    v.indexed = static_cast<double>((p + 1) / 4);
    v.keys += std::min(v.indexed, static_cast<double>(cfg->index_topk));
  } else if (ratio > 0) {
    v.keys += static_cast<double>((p + 1) / ratio);
  }
  return v;
}

// Attention FLOPs of one query (q.k and p.v over every head) plus the indexer's q.k scores.
double attention_flops(const ModelConfig& cfg, const Visible& v) {
  return 4.0 * static_cast<double>(cfg->num_attention_heads * cfg->head_dim) * v.keys +
         2.0 * static_cast<double>(cfg->index_n_heads * cfg->index_head_dim) * v.indexed;
}

// Expected distinct experts among `tokens` tokens each choosing k of E uniformly.
double distinct_experts(const ModelConfig& cfg, int64_t tokens) {
  const double E = static_cast<double>(cfg->n_routed_experts), k = static_cast<double>(cfg->num_experts_per_tok);
  return E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(tokens)));
}

// Waits for the backend by reading one element back.
void wait_for(Ops& ops, const DeviceTensor& t) {
  float one = 0;
  const DeviceTensor first = t.reshaped({t.numel()});
  ops.download(slice_rows(first.view(), 0, 1), host_view(&one, t.dtype(), {1}));
}

// A copy of `src`'s caches and length in a new sequence of the same capacity. Both keep their
// compressed entries and indexer keys in pools of their own (new_sequence without a pool), whose
// one page per ratio is taken at the same length, so the pools are copied whole.
SequenceCache clone_sequence(const Model& model, Ops& ops, const SequenceCache& src) {
  SequenceCache dst = model.new_sequence(ops, src.capacity(), src.dtype());
  dst.reserve(src.length());
  const int64_t layers = model.config().num_layers();
  for (int64_t l = 0; l < layers; ++l) {
    const LayerCache& a = src.layer(l);
    LayerCache& b = dst.layer(l);
    const std::pair<const DeviceTensor*, const DeviceTensor*> pairs[] = {
        {&a.window, &b.window},
        {&src.pool().compressed(l), &dst.pool().compressed(l)},
        {&a.compressor.kv, &b.compressor.kv},
        {&a.compressor.score, &b.compressor.score},
        {&src.pool().index_keys(l), &dst.pool().index_keys(l)},
        {&a.index_compressor.kv, &b.index_compressor.kv},
        {&a.index_compressor.score, &b.index_compressor.score}};
    for (const auto& [from, to] : pairs)
      if (!from->empty()) ops.copy({from->view(), to->view()});
  }
  dst.advance(src.length());
  return dst;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Random residual streams [T, n, D] in the activation dtype, made by the backend.
DeviceTensor random_streams(Ops& ops, const ModelConfig& cfg, int64_t tokens, uint64_t key) {
  DummyWeightParams p;
  p.name = "bench.streams";
  p.dtype = DType::kBF16;
  p.shape = {tokens, cfg->hc_mult, cfg->hidden_size};
  p.key = key;
  const DeviceTensor values = ops.dummy_weight(p).data;  // the backend's weight layout
  DeviceTensor streams = ops.alloc(DType::kBF16, p.shape);
  ops.copy({values.view(), streams.view()});
  return streams;
}

// Seconds of a repeated measurement: the median of the repeats and their range.
struct Timing {
  double median = 0;
  double min = 0;
  double max = 0;
};

Timing repeat(int64_t repeats, const std::function<double()>& measure) {
  std::vector<double> t;
  for (int64_t r = 0; r < repeats; ++r) t.push_back(measure());
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  return {n % 2 == 1 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t.front(), t.back()};
}

// Under a row of `row_seconds`: each op's time per run (ops of under 1% of the row left out), into
// the table and extra["profile"]; then the profile starts again.
void print_profile(ProfilingOps& profiler, double calls_per_run, double row_seconds, nlohmann::json& extra) {
  for (const ProfilingOps::Entry& e : profiler.entries()) {
    const double ms = e.seconds * 1e3 / calls_per_run;
    if (ms < 0.01 * row_seconds * 1e3) break;
    std::printf("         %-34s %9.3f ms  %6.1f calls\n", e.op.c_str(), ms, static_cast<double>(e.calls) / calls_per_run);
    extra["profile"][e.op] = ms;
  }
  profiler.reset();
}

// Runs forward_layer of `layer` on `batch` once to warm up (then `on_warm`), then `repeats` times
// `iters` runs; seconds per run.
Timing time_layer(const Model& model, Ops& ops, const ForwardBatch& batch, int64_t layer, const DeviceTensor& streams,
                  int64_t iters, int64_t repeats, const std::function<void()>& on_warm) {
  wait_for(ops, model.forward_layer(ops, batch, layer, streams));
  on_warm();
  return repeat(repeats, [&] {
    const auto start = Clock::now();
    DeviceTensor y;
    for (int64_t i = 0; i < iters; ++i) y = model.forward_layer(ops, batch, layer, streams);
    wait_for(ops, y);
    return seconds_since(start) / static_cast<double>(iters);
  });
}

void run_bench_layers(const BenchOptions& o) {
  if (!o.json_file.empty()) expect_writable_json_file(o.json_file, "report");
  const std::unique_ptr<Ops> backend = make_backend(o.device, o.threads, o.gpu);
  // With --profile every op goes through ProfilingOps, which waits after each call.
  ProfilingOps profiler(*backend);
  Ops* const ops = o.profile ? static_cast<Ops*>(&profiler) : backend.get();
  const ModelConfig full = model_config_of(o.source.model);
  std::fprintf(stderr, "bench: making dummy weights for one layer of each kind of %s on %s...\n", full.source().c_str(),
               std::string(ops->name()).c_str());
  const auto start = Clock::now();
  const Model model = Model::dummy(*ops, one_layer_per_kind(full), o.source.dummy_seed);
  const ModelConfig& cfg = model.config();
  std::fprintf(stderr, "bench: weights made in %.1f s\n", seconds_since(start));

  std::vector<LayerCost> costs;
  for (int64_t l = 0; l < cfg.num_layers(); ++l) costs.push_back(layer_cost(cfg, model.weights().layers.at(static_cast<size_t>(l))));

  const std::string multi_stream(multi_stream_mode_name(o.gpu.multi_stream.mode));
  const std::string fp8_gemm(fp8_gemm_choice_name(o.gpu.fp8_gemm));
  nlohmann::json report = {{"model", full.source()}, {"backend", std::string(ops->name())}, {"context", o.context},
                           {"multi_stream", multi_stream}, {"fp8_gemm", fp8_gemm},
                           {"attention", std::string(attention_choice_name(o.gpu.attention))}};
  std::printf("%s, %s backend, multi-stream %s, fp8-gemm %s; floors are the H200's (ENV.md)\n", cfg.source().c_str(),
              std::string(ops->name()).c_str(), multi_stream.c_str(), fp8_gemm.c_str());
  std::printf("%-6s %-22s %12s %9s %12s %8s\n", "layer", "run", "median ms", "range %", "floor ms", "x floor");
  const auto row = [&](int64_t l, const std::string& run, const Timing& t, double floor_seconds, nlohmann::json extra,
                       double calls_per_run) {
    const std::string kind(layer_kind_name(cfg.layer_kind(l)));
    const double seconds = t.median;
    std::printf("%-6s %-22s %12.3f %9.1f %12.3f %8.1f\n", kind.c_str(), run.c_str(), seconds * 1e3,
                100.0 * (t.max - t.min) / seconds, floor_seconds * 1e3, seconds / floor_seconds);
    extra["layer"] = kind;
    extra["run"] = run;
    extra["ms"] = seconds * 1e3;
    extra["ms_min"] = t.min * 1e3;
    extra["ms_max"] = t.max * 1e3;
    extra["repeats"] = o.repeats;
    extra["floor_ms"] = floor_seconds * 1e3;
    if (o.profile) print_profile(profiler, calls_per_run, seconds, extra);
    report["rows"].push_back(extra);
    std::fflush(stdout);
  };

  // Prefill: one sequence of `context` tokens, timed `repeats` times per layer after a warm-up run
  // (each run rewrites the same cache rows with the same values); it fills the caches the decode
  // steps start from.
  const int64_t fill = o.context;
  SequenceCache base = model.new_sequence(*ops, fill + 1, false);
  {
    std::fprintf(stderr, "bench: prefill of %lld tokens (warm-up, then timed)...\n", static_cast<long long>(fill));
    const DeviceTensor streams = random_streams(*ops, cfg, fill, 1);
    ForwardBatch batch;
    std::vector<int32_t> ids(static_cast<size_t>(fill));
    for (int64_t i = 0; i < fill; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % cfg->vocab_size);
    batch.add(base, ids, 0);
    for (int64_t l = 0; l < cfg.num_layers(); ++l) {
      const Timing seconds = time_layer(model, *ops, batch, l, streams, 1, o.repeats, [&] { profiler.reset(); });
      double attn = 0;
      for (int64_t p = 0; p < fill; ++p) attn += attention_flops(cfg, visible_at(cfg, cfg.compress_ratio(l), p));
      const double linear = costs[static_cast<size_t>(l)].linear_flops_per_token * static_cast<double>(fill);
      const double floor = linear / kFp8GemmFlops + attn / kBf16GemmFlops;
      row(l, "prefill " + std::to_string(fill), seconds, floor,
          {{"tokens", fill}, {"linear_tflop", linear / 1e12}, {"attention_tflop", attn / 1e12}},
          static_cast<double>(o.repeats));
    }
    base.advance(fill);
  }

  // Decode: `batch` sequences, each a copy of the prefilled one, one token each at position
  // `fill`; the same step repeated (it rewrites the same cache slots, the same work each time).
  for (int64_t batch_size : o.batches) {
    std::fprintf(stderr, "bench: decode, batch %lld at context %lld...\n", static_cast<long long>(batch_size),
                 static_cast<long long>(fill));
    std::vector<SequenceCache> seqs;
    for (int64_t s = 0; s < batch_size; ++s) seqs.push_back(clone_sequence(model, *ops, base));
    ForwardBatch batch;
    for (int64_t s = 0; s < batch_size; ++s) {
      const int32_t id = static_cast<int32_t>((s * 104729 + 7) % cfg->vocab_size);
      batch.add(seqs[static_cast<size_t>(s)], std::span<const int32_t>(&id, 1));
    }
    const DeviceTensor streams = random_streams(*ops, cfg, batch_size, 2);
    for (int64_t l = 0; l < cfg.num_layers(); ++l) {
      const Timing seconds = time_layer(model, *ops, batch, l, streams, o.iters, o.repeats, [&] { profiler.reset(); });
      const LayerCost& c = costs[static_cast<size_t>(l)];
      const int64_t ratio = cfg.compress_ratio(l);
      const Visible v = visible_at(cfg, ratio, fill);
      const double cache_bytes = kKvEntryBytes * v.keys + kIndexKeyBytes * v.indexed;
      const double experts = distinct_experts(cfg, batch_size);
      const double bytes = c.fixed_bytes + experts * c.expert_bytes + static_cast<double>(batch_size) * cache_bytes;
      row(l, "decode b=" + std::to_string(batch_size), seconds, bytes / kCopyBytesPerSecond,
          {{"batch", batch_size}, {"weight_mb", (c.fixed_bytes + experts * c.expert_bytes) / 1e6},
           {"cache_mb", static_cast<double>(batch_size) * cache_bytes / 1e6}, {"distinct_experts", experts}},
          static_cast<double>(o.iters * o.repeats));
    }
  }
  if (!o.json_file.empty()) write_json_file(o.json_file, report, 1, "report");
}

// Bytes a decode step of `batch` tokens at position `pos` must move: every layer's weights (the
// routed experts the batch is expected to touch), the cache entries each token reads, the head.
// With `ranks` expert-parallel ranks, one rank's: its `batch` tokens' entries, and its share of
// the experts the ranks' batch x ranks tokens touch.
double step_bytes(const Model& model, const std::vector<LayerCost>& costs, int64_t batch, int64_t pos,
                  int64_t ranks = 1) {
  const ModelConfig& cfg = model.config();
  double bytes = weight_bytes(model.weights().head) + weight_bytes(model.weights().norm);
  for (int64_t l = 0; l < cfg.num_layers(); ++l) {
    const LayerCost& c = costs[static_cast<size_t>(l)];
    const Visible v = visible_at(cfg, cfg.compress_ratio(l), pos);
    bytes += c.fixed_bytes + distinct_experts(cfg, batch * ranks) / static_cast<double>(ranks) * c.expert_bytes +
             static_cast<double>(batch) * (kKvEntryBytes * v.keys + kIndexKeyBytes * v.indexed);
  }
  return bytes;
}

// bench step's table: its header, and a timed row (median, range, tokens/s, floor and its ratio)
// whose numbers `row` (the JSON report's row) takes too.
void print_step_header() {
  std::printf("%-16s %12s %9s %12s %12s %8s\n", "run", "median ms", "range %", "tokens/s", "floor ms", "x floor");
}
void print_step_row(const std::string& run, const Timing& t, double tokens, double floor_seconds, nlohmann::json& row) {
  std::printf("%-16s %12.3f %9.1f %12.1f %12.3f %8.1f\n", run.c_str(), t.median * 1e3, 100.0 * (t.max - t.min) / t.median,
              tokens / t.median, floor_seconds * 1e3, t.median / floor_seconds);
  row["ms"] = t.median * 1e3;
  row["ms_min"] = t.min * 1e3;
  row["ms_max"] = t.max * 1e3;
  row["tokens_per_s"] = tokens / t.median;
  row["floor_ms"] = floor_seconds * 1e3;
}

// bench step over --data-parallel-size ranks with expert parallelism (tools/engine_ranks.h): every
// rank prefills the context and runs decode steps of `batch` sequences of its own, all together
// (each forward exchanges its MoE rows), each on its own thread. A row's time is a step of all
// ranks, its tokens the ranks' together, its floor one rank's bytes (its sequences' entries, its
// share of the experts the ranks' tokens touch) at one device's rate. Eager, without profiles.
void run_bench_step_ranks(const BenchOptions& o, const ModelConfig& cfg) {
  const std::vector<std::unique_ptr<Ops>> backends = make_rank_backends(o.device, o.threads, o.gpu, false);
  const auto n = static_cast<int>(backends.size());
  std::fprintf(stderr, "bench: making dummy weights of %s (layers of one kind share them) on %d ranks...\n",
               cfg.source().c_str(), n);
  std::vector<Model> models;
  for (int r = 0; r < n; ++r) {
    backends[static_cast<size_t>(r)]->bind_thread();
    models.push_back(Model::dummy(*backends[static_cast<size_t>(r)], cfg, o.source.dummy_seed, true, {}, {r, n}));
  }
  const std::vector<std::unique_ptr<ExpertComm>> group = make_expert_group(backends);
  RankThreads threads(n);
  threads.run([&](int r) { backends[static_cast<size_t>(r)]->bind_thread(); });
  std::vector<LayerCost> costs;
  for (int64_t l = 0; l < cfg.num_layers(); ++l)
    costs.push_back(layer_cost(cfg, models[0].weights().layers.at(static_cast<size_t>(l))));
  nlohmann::json report = {{"model", cfg.source()}, {"backend", std::string(backends[0]->name())},
                           {"context", o.context}, {"layers", cfg.num_layers()}, {"data_parallel_size", n}};
  std::printf("%s, %lld layers + head, %d data-parallel ranks of the %s backend with expert parallelism, eager; "
              "floors are one rank's bytes at the H200's rate (ENV.md)\n",
              cfg.source().c_str(), static_cast<long long>(cfg.num_layers()), n, std::string(backends[0]->name()).c_str());
  print_step_header();

  // Each rank's forward of `chunks[r]` tokens of each of its sequences; returns when every rank's
  // results are in.
  const auto forward_all = [&](std::vector<std::vector<SequenceCache>>& seqs, int64_t tokens, LogitsFor logits) {
    threads.run([&](int r) {
      Ops& ops = *backends[static_cast<size_t>(r)];
      ForwardBatch batch;
      batch.options.logits = logits;
      batch.options.expert_group = group[static_cast<size_t>(r)].get();
      std::vector<std::vector<int32_t>> ids;
      for (SequenceCache& seq : seqs[static_cast<size_t>(r)]) {
        std::vector<int32_t>& mine = ids.emplace_back(static_cast<size_t>(tokens));
        for (int64_t i = 0; i < tokens; ++i)
          mine[static_cast<size_t>(i)] = static_cast<int32_t>(((seq.length() + i) * 7919 + 13 * r) % cfg->vocab_size);
        batch.add(seq, mine);
      }
      wait_for(ops, models[static_cast<size_t>(r)].forward(ops, batch).final_hidden);
    });
  };
  const int64_t fill = o.context, steps = o.iters * o.repeats + 1;
  std::vector<std::vector<SequenceCache>> base(static_cast<size_t>(n));
  threads.run([&](int r) {
    base[static_cast<size_t>(r)].push_back(
        models[static_cast<size_t>(r)].new_sequence(*backends[static_cast<size_t>(r)], fill + steps, false));
  });
  std::fprintf(stderr, "bench: prefill of %lld tokens on every rank...\n", static_cast<long long>(fill));
  const auto prefill_start = Clock::now();
  for (int64_t begin = 0; begin < fill; begin += o.prefill_chunk)
    forward_all(base, std::min(o.prefill_chunk, fill - begin), LogitsFor::kNone);
  const double prefill_seconds = seconds_since(prefill_start);
  std::printf("%-16s %12.3f %9s %12.1f\n", ("prefill " + std::to_string(fill)).c_str(), prefill_seconds * 1e3, "",
              static_cast<double>(fill * n) / prefill_seconds);
  report["rows"].push_back({{"run", "prefill " + std::to_string(fill)}, {"ms", prefill_seconds * 1e3},
                            {"tokens_per_s", static_cast<double>(fill * n) / prefill_seconds}});
  for (const int64_t batch_size : o.batches) {
    std::fprintf(stderr, "bench: decode, batch %lld a rank at context %lld...\n", static_cast<long long>(batch_size),
                 static_cast<long long>(fill));
    std::vector<std::vector<SequenceCache>> seqs(static_cast<size_t>(n));
    threads.run([&](int r) {
      for (int64_t s = 0; s < batch_size; ++s)
        seqs[static_cast<size_t>(r)].push_back(clone_sequence(models[static_cast<size_t>(r)],
                                                              *backends[static_cast<size_t>(r)],
                                                              base[static_cast<size_t>(r)].front()));
    });
    forward_all(seqs, 1, LogitsFor::kLastTokenOfSequence);
    const Timing t = repeat(o.repeats, [&] {
      const auto begin = Clock::now();
      for (int64_t i = 0; i < o.iters; ++i) forward_all(seqs, 1, LogitsFor::kLastTokenOfSequence);
      return seconds_since(begin) / static_cast<double>(o.iters);
    });
    const double tokens = static_cast<double>(batch_size * n);
    const double floor_seconds = step_bytes(models[0], costs, batch_size, fill, n) / kReadBytesPerSecond;
    nlohmann::json row = {{"run", "decode"}, {"batch_per_rank", batch_size}};
    print_step_row("decode b=" + std::to_string(batch_size) + "x" + std::to_string(n), t, tokens, floor_seconds, row);
    report["rows"].push_back(row);
  }
  if (!o.json_file.empty()) write_json_file(o.json_file, report, 1, "report");
}

void run_bench_step(const BenchOptions& o) {
  if (!o.json_file.empty()) expect_writable_json_file(o.json_file, "report");
  ModelParams params = model_config_of(o.source.model).params();
  params.num_nextn_predict_layers = 0;  // a plain decode step runs no MTP
  params.compress_ratios.resize(static_cast<size_t>(params.num_hidden_layers));
  const ModelConfig cfg(params, model_config_of(o.source.model).source());
  if (o.gpu.data_parallel_size > 1) {
    if (o.profile || !o.prefill_lengths.empty())
      throw UsageError("bench step --data-parallel-size: --profile and --prefill-lengths run on one rank only");
    return run_bench_step_ranks(o, cfg);
  }
  const std::unique_ptr<Ops> backend = make_backend(o.device, o.threads, o.gpu);
  ProfilingOps profiler(*backend);
  Ops* const ops = o.profile ? static_cast<Ops*>(&profiler) : backend.get();
  std::fprintf(stderr, "bench: making dummy weights of %s (layers of one kind share them) on %s...\n",
               cfg.source().c_str(), std::string(ops->name()).c_str());
  const auto start = Clock::now();
  const Model model = Model::dummy(*ops, cfg, o.source.dummy_seed, true);
  std::fprintf(stderr, "bench: weights made in %.1f s\n", seconds_since(start));
  const std::unique_ptr<ForwardRunner> runner = make_forward_runner(*ops, o.gpu);
  const bool graphs = graph_stats(*runner).has_value();
  // The caches' entries as the engine takes them.
  const DType cache_dtype = o.kv_cache_dtype == "auto"  ? auto_cache_dtype(*ops, cfg)
                            : o.kv_cache_dtype == "fp8" ? DType::kF8E4M3
                                                        : DType::kBF16;
  check_cache_dtype(*ops, cfg, cache_dtype);
  const char* cache_name = cache_dtype == DType::kF8E4M3 ? "fp8" : "bf16";
  std::vector<LayerCost> costs;
  for (int64_t l = 0; l < cfg.num_layers(); ++l) costs.push_back(layer_cost(cfg, model.weights().layers.at(static_cast<size_t>(l))));

  const std::string multi_stream(multi_stream_mode_name(o.gpu.multi_stream.mode));
  const std::string fp8_gemm(fp8_gemm_choice_name(o.gpu.fp8_gemm));
  nlohmann::json report = {{"model", cfg.source()}, {"backend", std::string(ops->name())}, {"context", o.context},
                           {"layers", cfg.num_layers()}, {"multi_stream", multi_stream}, {"fp8_gemm", fp8_gemm},
                           {"attention", std::string(attention_choice_name(o.gpu.attention))},
                           {"cuda_graphs", graphs}, {"kv_cache_dtype", cache_name}};
  std::printf("%s, %lld layers + head, %s backend, multi-stream %s, fp8-gemm %s, %s caches, %s; floors are the H200's "
              "(ENV.md)\n",
              cfg.source().c_str(), static_cast<long long>(cfg.num_layers()), std::string(ops->name()).c_str(),
              multi_stream.c_str(), fp8_gemm.c_str(), cache_name, graphs ? "decode steps as CUDA graphs" : "eager launches");
  print_step_header();
  const auto row = [&](const std::string& run, const Timing& t, double tokens, double floor_seconds, nlohmann::json extra,
                       double calls_per_run) {
    extra["run"] = run;
    print_step_row(run, t, tokens, floor_seconds, extra);
    if (o.profile) print_profile(profiler, calls_per_run, t.median, extra);
    report["rows"].push_back(extra);
    std::fflush(stdout);
  };

  // Prefill: `seq` filled with `fill` tokens in chunks of --prefill-chunk, timed once, beside the
  // FLOPs of its linears and attention (and the rate they ran at).
  const auto prefill = [&](SequenceCache& seq, int64_t fill) {
    std::fprintf(stderr, "bench: prefill of %lld tokens...\n", static_cast<long long>(fill));
    std::vector<int32_t> ids(static_cast<size_t>(fill));
    for (int64_t i = 0; i < fill; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % cfg->vocab_size);
    profiler.reset();
    const auto prefill_start = Clock::now();
    DeviceTensor last;
    for (int64_t begin = 0; begin < fill; begin += o.prefill_chunk) {
      ForwardBatch batch;
      batch.options.logits = LogitsFor::kNone;
      const int64_t n = std::min(o.prefill_chunk, fill - begin);
      batch.add(seq, std::span<const int32_t>(ids).subspan(static_cast<size_t>(begin), static_cast<size_t>(n)));
      last = model.forward(*ops, batch).final_hidden;
    }
    wait_for(*ops, last);
    const double seconds = seconds_since(prefill_start);
    double linear = 0, attn = 0;
    for (int64_t l = 0; l < cfg.num_layers(); ++l) {
      linear += costs[static_cast<size_t>(l)].linear_flops_per_token * static_cast<double>(fill);
      for (int64_t p = 0; p < fill; ++p) attn += attention_flops(cfg, visible_at(cfg, cfg.compress_ratio(l), p));
    }
    const double tflop_per_s = (linear + attn) / seconds / 1e12;
    row("prefill " + std::to_string(fill), {seconds, seconds, seconds}, static_cast<double>(fill),
        linear / kFp8GemmFlops + attn / kBf16GemmFlops,
        {{"tokens", fill}, {"chunk", o.prefill_chunk}, {"linear_tflop", linear / 1e12}, {"attention_tflop", attn / 1e12},
         {"tflop_per_s", tflop_per_s}},
        1.0);
    std::printf("%-16s %12.2f TFLOP/s (linears and attention)\n", "", tflop_per_s);
  };
  // The context's prefill fills the caches the decode steps start from; --prefill-lengths add
  // prefills of new sequences, dropped after their row.
  const int64_t fill = o.context;
  const int64_t steps = o.iters * o.repeats + 1;  // each decode step advances the sequences
  SequenceCache base = model.new_sequence(*ops, fill + steps, cache_dtype);
  prefill(base, fill);
  for (const int64_t length : o.prefill_lengths) {
    SequenceCache seq = model.new_sequence(*ops, length, cache_dtype);
    prefill(seq, length);
  }

  // Decode: `batch` copies of the prefilled sequence, one token each per step, logits of every
  // sequence; each step advances them, so step i is at position context + i.
  for (int64_t batch_size : o.batches) {
    std::fprintf(stderr, "bench: decode, batch %lld at context %lld...\n", static_cast<long long>(batch_size),
                 static_cast<long long>(fill));
    std::vector<SequenceCache> seqs;
    for (int64_t s = 0; s < batch_size; ++s) seqs.push_back(clone_sequence(model, *ops, base));
    const auto step = [&] {
      ForwardBatch batch;
      batch.options.logits = LogitsFor::kLastTokenOfSequence;
      for (int64_t s = 0; s < batch_size; ++s) {
        const int32_t id = static_cast<int32_t>((s * 104729 + seqs[static_cast<size_t>(s)].length()) % cfg->vocab_size);
        batch.add(seqs[static_cast<size_t>(s)], std::span<const int32_t>(&id, 1));
      }
      return runner->forward(model, *ops, batch).logits;
    };
    wait_for(*ops, step());
    profiler.reset();
    double enqueue_seconds = 0;  // host time inside forward: a step that takes no longer is host-bound
    const Timing t = repeat(o.repeats, [&] {
      const auto begin = Clock::now();
      DeviceTensor logits;
      for (int64_t i = 0; i < o.iters; ++i) {
        const auto enqueue_begin = Clock::now();
        logits = step();
        enqueue_seconds += seconds_since(enqueue_begin);
      }
      wait_for(*ops, logits);
      return seconds_since(begin) / static_cast<double>(o.iters);
    });
    const double bytes = step_bytes(model, costs, batch_size, fill);
    const double enqueue_ms = enqueue_seconds * 1e3 / static_cast<double>(o.iters * o.repeats);
    nlohmann::json extra = {{"batch", batch_size}, {"gb_per_step", bytes / 1e9}, {"enqueue_ms", enqueue_ms}};
    const size_t nodes = graphs ? graph_stats(*runner)->last_graph_nodes : 0;
    if (graphs) extra["graph_nodes"] = nodes;
    row("decode b=" + std::to_string(batch_size), t, static_cast<double>(batch_size), bytes / kReadBytesPerSecond, extra,
        static_cast<double>(o.iters * o.repeats));
    std::printf("%-16s %12.3f ms of it on the host, inside forward (enqueue)\n", "", enqueue_ms);
    if (graphs) std::printf("%-16s %12zu nodes in the step's graph (kernels, copies, allocations)\n", "", nodes);
  }
  if (!o.json_file.empty()) write_json_file(o.json_file, report, 1, "report");
}

// The options bench layers and bench step share.
void add_common_bench_options(CLI::App* cmd, BenchOptions& o) {
  cmd->add_option("--model", o.source.model, "Preset name or model folder (only config.json is read)")
      ->default_str("flash");
  cmd->add_option("--dummy-seed", o.source.dummy_seed, "Seed of the dummy weights")->default_str("0");
  add_device_option(cmd, o.device);
  add_gpu_options(cmd, o.gpu);
  cmd->add_option("--context", o.context,
                  "Tokens of the timed prefill, which fills the caches; each decode step is the token after them")
      ->check(positive_number())
      ->default_str("8192");
  cmd->add_option("--batch", o.batches, "Decode batch sizes")
      ->delimiter(',')
      ->check(positive_number())
      ->default_str("1,16,64");
  cmd->add_option("--json", o.json_file, "Also write the rows to this JSON file");
  cmd->add_option("--threads", o.threads, "CPU threads (0: all cores)")->check(non_negative_number());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "layers",
      "Time one layer of each kind (swa, csa, hca) with dummy weights: a prefill of the context, then decode steps "
      "per batch size after it, each beside its floor (bytes / 4.28 TB/s for decode; FLOPs / the measured FP8 and bf16 GEMM rates "
      "for prefill)");
  add_common_bench_options(cmd, *opts);
  cmd->add_option("--iters", opts->iters, "Decode steps averaged in one timing")
      ->check(positive_number())
      ->default_str("20");
  cmd->add_option("--repeats", opts->repeats,
                  "Timings per row (prefills; groups of --iters decode steps): the table shows their median and "
                  "range, since runs on a GPU with side streams vary by up to a quarter")
      ->check(positive_number())
      ->default_str("3");
  cmd->add_flag("--profile", opts->profile,
                "Under each row, the time of each op (ops waited for one by one, so the rows' times grow)");
  cmd->callback([opts] { run_bench_layers(*opts); });

  auto step = std::make_shared<BenchOptions>();
  step->iters = 10;
  CLI::App* step_cmd = bench->add_subcommand(
      "step",
      "Time the whole model (every layer and the head, no MTP) with dummy weights, layers of one kind sharing one set "
      "(each still far larger than L2): a chunked prefill of the context, then whole decode steps per batch size, each "
      "beside its floor (bytes / 4.43 TB/s for decode; FLOPs / the measured FP8 and bf16 GEMM rates for prefill). "
      "Decode steps run as CUDA graphs unless --cuda-graphs off (or --profile, which times ops one by one)");
  add_common_bench_options(step_cmd, *step);
  step_cmd->add_option("--iters", step->iters, "Decode steps averaged in one timing")
      ->check(positive_number())
      ->default_str("10");
  step_cmd->add_option("--repeats", step->repeats, "Timings per decode row (the table shows their median and range)")
      ->check(positive_number())
      ->default_str("3");
  step_cmd->add_option("--prefill-chunk", step->prefill_chunk, "Tokens per forward of the prefill")
      ->check(positive_number())
      ->default_str("8192");
  step_cmd->add_option("--prefill-lengths", step->prefill_lengths,
                       "More prefill rows after the context's, each of a new sequence of that many tokens "
                       "(comma-separated, e.g. 2048,32768)")
      ->delimiter(',')
      ->check(positive_number());
  step_cmd->add_flag("--profile", step->profile,
                     "Under each row, the time of each op (ops waited for one by one, so the rows' times grow)");
  step_cmd->add_option("--kv-cache-dtype", step->kv_cache_dtype,
                       "The caches' entries, as serve's option: bf16 rows, or fp8 (584-byte FP8 attention entries, "
                       "68-byte MXFP4 indexer keys); auto: fp8 where the backend reads them (the floors count FP8 "
                       "entries either way)")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}))
      ->default_str("auto");
  step_cmd->callback([step] { run_bench_step(*step); });
  add_bench_throughput_command(*bench);
  add_bench_sampling_command(*bench);
  add_bench_serve_command(*bench);
}

}  // namespace dsv4::tools
