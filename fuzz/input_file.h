// For the fuzzers whose target reads a file (config.json, tokenizer.json): each input is written
// to one file of the process's own, which is removed when the process exits, so that fuzzing
// leaves nothing behind in /tmp.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dsv4::fuzz {

// Writes `data` to /tmp/dsv4_fuzz_TAG_PID.json and returns the path ("" when it cannot be written).
inline std::string write_input_file(const char* tag, const uint8_t* data, size_t size) {
  struct RemovedAtExit {
    std::string path;
    ~RemovedAtExit() { std::remove(path.c_str()); }
  };
  static const RemovedAtExit file{"/tmp/dsv4_fuzz_" + std::string(tag) + "_" + std::to_string(getpid()) + ".json"};
  FILE* out = std::fopen(file.path.c_str(), "wb");
  if (!out) return {};
  std::fwrite(data, 1, size, out);
  std::fclose(out);
  return file.path;
}

}  // namespace dsv4::fuzz
