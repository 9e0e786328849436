// `dsv4 bench sampling`: the host sampler (sampling/sampler.h) on vocabulary-sized logits, one
// row at a time and as a step's rows on a pool of threads the size the engine gives its own
// sampling pool, for the request settings servers see most, and the backend's draw of a step's
// rows (Ops::edit_logits for penalties, then Ops::sample_rows: what the engine runs when no
// request of the step needs a dense mask or logprobs), checked to give the host's tokens.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "ops/ops.h"
#include "runtime/engine.h"
#include "sampling/sampler.h"
#include "sampling/token_draw.h"
#include "tools/backend.h"
#include "tools/commands.h"
#include "tools/json_file.h"
#include "tools/number_checks.h"

namespace dsv4::tools {
namespace {

struct SamplingBenchOptions {
  int64_t vocab = 129280;  // DeepSeek-V4's
  int64_t batch = 64;
  int64_t draws = 64;
  int threads = 0;
  uint64_t seed = 0;
  Device device = Device::kCpu;
  std::string json_file;
};

struct SamplingCase {
  const char* name;
  SamplingParams params;
};

SamplingParams with_logprobs(SamplingParams p, int32_t top) {
  p.logprobs = true;
  p.top_logprobs = top;
  return p;
}

std::vector<SamplingCase> cases() {
  auto with = [](float temperature, float top_p, int32_t top_k, float min_p, float repetition_penalty) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.top_k = top_k;
    p.min_p = min_p;
    p.repetition_penalty = repetition_penalty;
    return p;
  };
  return {{"temperature 1 (OpenAI's defaults)", with(1.0f, 1.0f, 0, 0.0f, 1.0f)},
          {"temperature 0.7, top_p 0.95", with(0.7f, 0.95f, 0, 0.0f, 1.0f)},
          {"temperature 1, top_k 50", with(1.0f, 1.0f, 50, 0.0f, 1.0f)},
          {"temperature 0.6, top_p 0.95, top_k 20", with(0.6f, 0.95f, 20, 0.0f, 1.0f)},
          {"temperature 1, min_p 0.05", with(1.0f, 1.0f, 0, 0.05f, 1.0f)},
          {"temperature 0.8, top_p 0.9, repetition 1.1", with(0.8f, 0.9f, 0, 0.0f, 1.1f)},
          {"temperature 1, logprobs with 5 top", with_logprobs(with(1.0f, 1.0f, 0, 0.0f, 1.0f), 5)}};
}

// Logits shaped like a language model's: a broad normal body and a few dozen far likelier tokens.
std::vector<float> model_like_logits(int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> body(0.0f, 2.5f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) v = body(rng);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(pick(rng))] += 8.0f + static_cast<float>(i % 4);
  return x;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// What the backend's draw of a step's rows took, and whether it gave the host's tokens.
struct BackendDraws {
  double ms_per_step = 0;
  int64_t differing = 0;  // rows whose token is not the host's
};

// Times `iterations` backend draws of every row of `x` under `params` after `history` (each
// followed by the download of the ids, as the engine's step does), after one untimed draw. When
// the settings edit the logits (penalties), each draw edits a fresh copy of x (the copy timed
// too); with logprobs, each draw takes them too (their download not timed).
BackendDraws time_backend_draws(Ops& ops, ConstTensorView x, const SamplingParams& params, uint64_t seed,
                                const TokenHistory& history, int64_t iterations, const std::vector<int32_t>& host_ids) {
  const int64_t rows = x.dim(0);
  const uint64_t index = history.output.size();
  std::vector<LogitEdit> edits;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<LogitEdit> row_edits = logit_edits(params, history, {}, static_cast<size_t>(x.dim(1)),
                                                         static_cast<int32_t>(r));
    edits.insert(edits.end(), row_edits.begin(), row_edits.end());
  }
  constexpr int64_t kEditWords = sizeof(LogitEdit) / sizeof(int32_t);
  const auto num_edits = static_cast<int64_t>(edits.size());
  DeviceTensor edit_words = ops.alloc(DType::kI32, {num_edits, kEditWords});
  if (num_edits > 0)
    ops.upload(host_view(edits.data(), DType::kI32, {num_edits, kEditWords}), edit_words.view());
  DeviceTensor edited = ops.alloc(DType::kF32, x.shape());
  const std::vector<DrawRow> draws(static_cast<size_t>(rows), draw_row_of(params, seed, index));
  constexpr int64_t kWords = sizeof(DrawRow) / sizeof(int64_t);
  DeviceTensor draw_rows = ops.alloc(DType::kI64, {rows, kWords});
  ops.upload(host_view(draws.data(), DType::kI64, {rows, kWords}), draw_rows.view());
  DeviceTensor out = ops.alloc(DType::kI32, {rows});
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  const TensorView ids_view(reinterpret_cast<std::byte*>(ids.data()), DType::kI32, {rows});
  // With logprobs, the raw rows' logprobs of the drawn tokens too (Ops::row_logprobs).
  const std::vector<int32_t> top_counts(static_cast<size_t>(rows), params.top_logprobs);
  DeviceTensor counts = ops.alloc(DType::kI32, {rows});
  ops.upload(host_view(top_counts.data(), DType::kI32, {rows}), counts.view());
  const int64_t width = std::max<int32_t>(1, params.top_logprobs);
  DeviceTensor logprob = ops.alloc(DType::kF32, {rows}), rank = ops.alloc(DType::kI32, {rows});
  DeviceTensor top_ids = ops.alloc(DType::kI32, {rows, width}), top_logprobs = ops.alloc(DType::kF32, {rows, width});
  auto draw = [&] {
    if (num_edits == 0) {
      ops.sample_rows({x, draw_rows.view(), out.view()});
    } else {
      ops.copy({x, edited.view()});
      ops.edit_logits({edited.view(), edit_words.view()});
      ops.sample_rows({edited.view(), draw_rows.view(), out.view()});
    }
    if (params.logprobs)
      ops.row_logprobs({x, out.view(), counts.view(), logprob.view(), rank.view(), top_ids.view(), top_logprobs.view()});
  };
  draw();
  ops.download(out.view(), ids_view);
  BackendDraws result;
  for (int64_t r = 0; r < rows; ++r) result.differing += ids[static_cast<size_t>(r)] != host_ids[static_cast<size_t>(r)];
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    draw();
    ops.download(out.view(), ids_view);
  }
  result.ms_per_step = ms_since(t0) / static_cast<double>(iterations);
  return result;
}

void run_bench_sampling(const SamplingBenchOptions& o) {
  if (!o.json_file.empty()) expect_writable_json_file(o.json_file, "report");
  const int threads = o.threads > 0 ? o.threads : default_sampling_threads();
  std::vector<std::vector<float>> rows;
  for (int64_t r = 0; r < o.batch; ++r) rows.push_back(model_like_logits(o.vocab, o.seed + static_cast<uint64_t>(r)));
  const std::vector<int32_t> prompt(1024, 1), output(256, 2);  // a history for the repetition penalty
  ThreadPool pool(threads);
  const std::unique_ptr<Ops> backend = make_backend(o.device, threads);
  DeviceTensor x = backend->alloc(DType::kF32, {o.batch, o.vocab});
  for (int64_t r = 0; r < o.batch; ++r)
    backend->upload(host_view(rows[static_cast<size_t>(r)].data(), DType::kF32, {1, o.vocab}),
                    slice_rows(x.view(), r, r + 1));
  const char* device = o.device == Device::kCuda ? "cuda" : "cpu";
  std::printf("host sampling of %lld logits a row; a step of %lld rows on %d threads; the backend's draw (%s) of "
              "the step's rows, ids downloaded\n",
              static_cast<long long>(o.vocab), static_cast<long long>(o.batch), threads, device);
  std::printf("%-46s %12s %12s %16s\n", "settings", "ms / row", "ms / step", "backend ms/step");
  nlohmann::json report = {{"vocab", o.vocab}, {"batch", o.batch}, {"threads", threads}, {"device", device},
                           {"rows", nlohmann::json::array()}};
  int64_t differing = 0;
  int64_t checksum = 0;
  for (const SamplingCase& c : cases()) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t d = 0; d < o.draws; ++d)
      checksum += sample_token(rows[static_cast<size_t>(d % o.batch)], c.params, o.seed + static_cast<uint64_t>(d),
                               {prompt, output})
                      .id;
    const double row_ms = ms_since(t0) / static_cast<double>(o.draws);
    std::vector<int32_t> ids(static_cast<size_t>(o.batch));
    t0 = std::chrono::steady_clock::now();
    pool.parallel_for(o.batch, [&](int64_t r) {
      ids[static_cast<size_t>(r)] = sample_token(rows[static_cast<size_t>(r)], c.params, o.seed, {prompt, output}).id;
    });
    const double step_ms = ms_since(t0);
    for (int32_t id : ids) checksum += id;
    nlohmann::json row = {{"settings", c.name}, {"ms_per_row", row_ms}, {"ms_per_step", step_ms}};
    const BackendDraws b = time_backend_draws(*backend, x.view(), c.params, o.seed, {prompt, output},
                                              std::max<int64_t>(1, o.draws / o.batch), ids);
    differing += b.differing;
    std::printf("%-46s %12.3f %12.3f %16.3f\n", c.name, row_ms, step_ms, b.ms_per_step);
    row["backend_ms_per_step"] = b.ms_per_step;
    row["backend_rows_not_the_hosts"] = b.differing;
    report["rows"].push_back(std::move(row));
  }
  std::printf("(token checksum %lld; rows where the backend's token is not the host's: %lld)\n",
              static_cast<long long>(checksum), static_cast<long long>(differing));
  if (!o.json_file.empty()) write_json_file(o.json_file, report, 2, "report");
}

}  // namespace

void add_bench_sampling_command(CLI::App& bench) {
  auto opts = std::make_shared<SamplingBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "sampling",
      "Time the host sampler (temperature, top-p, top-k, min-p, penalties) on vocabulary-sized logits: per row, and a "
      "step's rows on the engine's sampling threads; and the backend's draw of a step's rows (--device), checked to "
      "give the host's tokens");
  cmd->add_option("--vocab", opts->vocab, "Logits a row")->check(positive_number())->default_str("129280");
  cmd->add_option("--batch", opts->batch, "Rows a step (sequences sampled together)")
      ->check(positive_number())
      ->default_str("64");
  cmd->add_option("--draws", opts->draws, "Rows timed one at a time per setting")
      ->check(positive_number())
      ->default_str("64");
  cmd->add_option("--threads", opts->threads, "Sampling threads (0: the engine's default, all cores up to 16)")
      ->check(non_negative_number());
  cmd->add_option("--seed", opts->seed, "Seed of the logits and the draws")->default_str("0");
  add_device_option(cmd, opts->device);
  cmd->add_option("--json", opts->json_file, "Also write the rows to this JSON file");
  cmd->callback([opts] { run_bench_sampling(*opts); });
}

}  // namespace dsv4::tools
