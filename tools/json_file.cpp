// See json_file.h.
#include "tools/json_file.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace dsv4::tools {

void write_json_file(const std::string& path, const nlohmann::json& value, int indent, const std::string& what) {
  std::ofstream out(path);
  out << value.dump(indent) << "\n";
  if (!out) throw IoError(path + ": cannot write the " + what);
}

void expect_writable_json_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  {
    const std::ofstream out(path, std::ios::app);
    if (!out) throw IoError(path + ": cannot write the " + what);
  }
  if (!existed) std::filesystem::remove(path, ec);
}

}  // namespace dsv4::tools
