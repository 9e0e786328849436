// libFuzzer entry point for tokenizer.json loading: Tokenizer::load must give a tokenizer or throw
// FormatError naming the field; a tokenizer it gives must encode and decode without failing.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/dsv4_fuzz_tokenizer_" + std::to_string(getpid()) + ".json";
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  try {
    const dsv4::Tokenizer tokenizer = dsv4::Tokenizer::load(path);
    const std::vector<int32_t> ids = tokenizer.encode("Hello, world! 你好 <think>x</think>");
    tokenizer.decode(ids);
  } catch (const dsv4::FormatError&) {
  }
  return 0;
}
