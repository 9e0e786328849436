// `dsv4 serve` in a build without the server: the command exists and says what is missing
// (cpp-httplib, found at configure time, or the serving engine library).
#include "core/error.h"
#include "tools/commands.h"

namespace dsv4::tools {

void add_serve_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (not in this build)");
  cmd->allow_extras();
  cmd->callback([] {
    throw UsageError(
        "serve is not in this build: it needs cpp-httplib (apt install libcpp-httplib-dev, or "
        "scripts/setup.sh) and the serving engine (src/runtime); reconfigure with CMake after "
        "installing");
  });
}

}  // namespace dsv4::tools
