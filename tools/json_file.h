// Writing a benchmark's JSON report to the file its --json / --save-result option names, shared by
// the bench subcommands so that each reports a file it cannot write the same way.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::tools {

// Writes `value` (dump(indent)) and a newline to `path`; IoError "PATH: cannot write the WHAT" when
// the file cannot be created or written.
void write_json_file(const std::string& path, const nlohmann::json& value, int indent, const std::string& what);

// The same IoError before a benchmark runs, so that a path that cannot be written fails at once
// instead of after the run: opens `path` for appending (leaving an existing file as it was, and
// removing the empty file it created).
void expect_writable_json_file(const std::string& path, const std::string& what);

}  // namespace dsv4::tools
