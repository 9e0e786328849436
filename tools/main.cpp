// The `dsv4` command line: parses the subcommand and turns library errors into messages and
// exit codes (the only place in the project that exits).
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"dsv4: DeepSeek-V4 inference engine"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dsv4::Error& e) {
    std::fprintf(stderr, "dsv4: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
