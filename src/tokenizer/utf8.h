// UTF-8 validation and repair shared by the tokenizer's encoder and decoders: invalid bytes are
// replaced by U+FFFD, one per maximal invalid subpart (the Unicode "substitution of maximal
// subparts" rule, the one Rust's String::from_utf8_lossy and Python's errors="replace" follow).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// What starts at a position of a byte string.
struct Unit {
  enum Kind {
    kValid,      // a whole well-formed character of `size` bytes
    kInvalid,    // `size` bytes (a maximal subpart) that no well-formed character starts with
    kTruncated,  // all `size` remaining bytes are a proper prefix of a well-formed character
  };
  Kind kind;
  size_t size;  // >= 1
};

// Classifies the unit at `pos` (< bytes.size()).
Unit next_unit(std::string_view bytes, size_t pos);

// Byte offset of the first byte that is not part of a well-formed character, or bytes.size().
size_t first_invalid_offset(std::string_view bytes);

// Appends `bytes` to `out` with every invalid subpart (a truncated tail included) replaced by
// U+FFFD.
void append_repaired(std::string_view bytes, std::string& out);

}  // namespace dsv4::utf8
