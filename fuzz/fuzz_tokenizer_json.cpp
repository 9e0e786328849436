// libFuzzer entry point for tokenizer.json loading: Tokenizer::load must give a tokenizer or throw
// FormatError naming the field; a tokenizer it gives must encode and decode without failing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz/input_file.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dsv4::fuzz::write_input_file("tokenizer", data, size);
  if (path.empty()) return 0;
  try {
    const dsv4::Tokenizer tokenizer = dsv4::Tokenizer::load(path);
    const std::vector<int32_t> ids = tokenizer.encode("Hello, world! 你好 <think>x</think>");
    tokenizer.decode(ids);
  } catch (const dsv4::FormatError&) {
  }
  return 0;
}
