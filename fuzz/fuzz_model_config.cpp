// libFuzzer entry point for config.json: load_model_config must give a validated ModelConfig or
// throw ConfigError / FormatError naming the problem; anything else is a bug. The input goes
// through a file, as a real config.json does.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "config/model_config.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/dsv4_fuzz_config_" + std::to_string(getpid()) + ".json";
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  try {
    dsv4::load_model_config(path);
  } catch (const dsv4::ConfigError&) {
  } catch (const dsv4::FormatError&) {
  }
  return 0;
}
