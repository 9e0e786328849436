// The `dsv4` subcommands. Each add_*_command registers its options on `app` and sets a
// callback that does the work; library errors propagate to main(), which reports them.
#pragma once

#include <CLI/CLI.hpp>

namespace dsv4::tools {

void add_make_model_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
// `bench throughput`, registered under `bench` by add_bench_command.
void add_bench_throughput_command(CLI::App& bench);
// `bench sampling` (bench_sampling.cpp), registered under `bench` by add_bench_command.
void add_bench_sampling_command(CLI::App& bench);
// `bench serve`, registered under `bench` by add_bench_command: bench_serve.cpp, or
// bench_serve_unavailable.cpp without cpp-httplib.
void add_bench_serve_command(CLI::App& bench);
void add_serve_command(CLI::App& app);  // serve.cpp, or serve_unavailable.cpp without the server

}  // namespace dsv4::tools
