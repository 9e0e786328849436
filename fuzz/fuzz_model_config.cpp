// libFuzzer entry point for config.json: load_model_config must give a validated ModelConfig or
// throw ConfigError / FormatError naming the problem; anything else is a bug. The input goes
// through a file, as a real config.json does.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/model_config.h"
#include "core/error.h"
#include "fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dsv4::fuzz::write_input_file("config", data, size);
  if (path.empty()) return 0;
  try {
    dsv4::load_model_config(path);
  } catch (const dsv4::ConfigError&) {
  } catch (const dsv4::FormatError&) {
  }
  return 0;
}
