// The `dsv4` command line: registers the subcommands and turns library errors into messages
// and exit codes (the only place in the project that exits).
#include <cstdio>
#include <exception>
#include <new>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dsv4: DeepSeek-V4 inference engine"};
  app.require_subcommand(1);
  dsv4::tools::add_make_model_command(app);
  dsv4::tools::add_inspect_command(app);
  dsv4::tools::add_tokenize_command(app);
  dsv4::tools::add_logits_command(app);
  dsv4::tools::add_generate_command(app);
  dsv4::tools::add_bench_command(app);
  dsv4::tools::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dsv4::Error& e) {
    std::fprintf(stderr, "dsv4: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "dsv4: error: out of memory (a size given on the command line or in the model's "
                         "config may be larger than this machine can hold)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
