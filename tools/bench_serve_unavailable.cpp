// `dsv4 bench serve` in a build without cpp-httplib: the command exists and says what is missing.
#include "core/error.h"
#include "tools/commands.h"

namespace dsv4::tools {

void add_bench_serve_command(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand("serve", "Load an OpenAI-compatible server (not in this build)");
  cmd->allow_extras();
  cmd->callback([] {
    throw UsageError(
        "bench serve is not in this build: it needs cpp-httplib's client (apt install libcpp-httplib-dev, or "
        "scripts/setup.sh); reconfigure with CMake after installing");
  });
}

}  // namespace dsv4::tools
