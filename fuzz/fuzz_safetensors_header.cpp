// libFuzzer entry point for the safetensors header parser. Every input must either parse into a
// header that keeps the parser's promises (tensors sorted, inside the input, sized by their
// shape, not overlapping) or throw FormatError; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "core/error.h"
#include "loader/safetensors.h"

namespace {

void require(bool holds, const char* promise) {
  if (holds) return;
  std::fprintf(stderr, "parse_safetensors_header broke its promise: %s\n", promise);
  std::abort();
}

void check_promises(const dsv4::SafetensorsHeader& header, size_t file_bytes) {
  require(header.data_offset >= 8 && header.data_offset <= file_bytes, "data_offset in the file");
  const uint64_t data_bytes = file_bytes - header.data_offset;
  uint64_t previous_begin = 0;
  uint64_t previous_end = 0;
  for (const dsv4::TensorInfo& t : header.tensors) {
    require(t.begin <= t.end && t.end <= data_bytes, "offsets inside the data section");
    require(t.begin >= previous_begin, "tensors sorted by begin");
    const uint64_t nbytes =
        static_cast<uint64_t>(dsv4::shape_numel(t.shape)) * dsv4::dtype_size(t.dtype);
    require(t.end - t.begin == nbytes, "byte count equal to shape x dtype");
    if (nbytes > 0) {
      require(t.begin >= previous_end, "non-empty tensors do not overlap");
      previous_end = t.end;
    }
    previous_begin = t.begin;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header =
        dsv4::parse_safetensors_header(std::as_bytes(std::span(data, size)), "fuzz-input");
    check_promises(header, size);
  } catch (const dsv4::FormatError&) {
    // A malformed input rejected with a FormatError is the expected outcome.
  }
  return 0;
}
