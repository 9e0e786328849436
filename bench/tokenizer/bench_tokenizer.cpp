// Tokenizer throughput on English text, one thread: encode with a warm word cache (steady
// state), encode with a cold one (the first pass of a fresh tokenizer) and decode. Usage:
//   bench_tokenizer TOKENIZER_JSON [TEXT_FILE...] [--benchmark_* flags]
// With no text files it reads the English licence texts of /usr/share/common-licenses.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "tokenizer/tokenizer.h"

namespace {

std::string g_tokenizer_file;
std::string g_text;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void encode_warm(benchmark::State& state) {
  const auto tokenizer = dsv4::Tokenizer::load(g_tokenizer_file);
  size_t tokens = tokenizer.encode(g_text).size();
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer.encode(g_text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void encode_cold(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    auto tokenizer = std::make_unique<dsv4::Tokenizer>(dsv4::Tokenizer::load(g_tokenizer_file));
    state.ResumeTiming();
    benchmark::DoNotOptimize(tokenizer->encode(g_text));
    state.PauseTiming();
    tokenizer.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_text.size()));
}

void decode(benchmark::State& state) {
  const auto tokenizer = dsv4::Tokenizer::load(g_tokenizer_file);
  const std::vector<int32_t> ids = tokenizer.encode(g_text);
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer.decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g_text.size()));
}

void load(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(dsv4::Tokenizer::load(g_tokenizer_file));
}

}  // namespace

BENCHMARK(encode_warm)->Unit(benchmark::kMillisecond);
BENCHMARK(encode_cold)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(decode)->Unit(benchmark::kMillisecond);
BENCHMARK(load)->Unit(benchmark::kMillisecond)->Iterations(3);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON [TEXT_FILE...] [--benchmark_* flags]\n",
                 argv[0]);
    return 2;
  }
  g_tokenizer_file = argv[1];
  std::vector<std::filesystem::path> files(argv + 2, argv + argc);
  if (files.empty()) {
    for (const auto& entry : std::filesystem::directory_iterator("/usr/share/common-licenses")) {
      if (entry.is_regular_file() && !entry.is_symlink()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  }
  for (const auto& file : files) g_text += read_file(file);
  std::fprintf(stderr, "bench_tokenizer: %zu files, %zu bytes of text\n", files.size(),
               g_text.size());
  if (g_text.empty()) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
