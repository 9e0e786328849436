// UTF-8 classification per the Unicode standard's table of well-formed byte sequences (§3.9,
// table 3-7): the lead byte fixes the length and the allowed range of the second byte.
#include "tokenizer/utf8.h"

#include <cstdint>
#include <cstring>

namespace dsv4::utf8 {
namespace {

// Sequence length implied by a lead byte and the allowed range of the byte after it; length 0
// marks a byte that cannot start a character.
struct Lead {
  uint8_t length;
  uint8_t second_min;
  uint8_t second_max;
};

Lead lead_of(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Unit next_unit(std::string_view bytes, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + pos;
  const size_t left = bytes.size() - pos;
  const Lead lead = lead_of(p[0]);
  if (lead.length == 1) return {Unit::kValid, 1};
  if (lead.length == 0) return {Unit::kInvalid, 1};
  for (size_t i = 1; i < lead.length; ++i) {
    if (i == left) return {Unit::kTruncated, left};
    const uint8_t lo = i == 1 ? lead.second_min : 0x80;
    const uint8_t hi = i == 1 ? lead.second_max : 0xBF;
    if (p[i] < lo || p[i] > hi) return {Unit::kInvalid, i};
  }
  return {Unit::kValid, lead.length};
}

size_t first_invalid_offset(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    // ASCII fast path: eight bytes at a time.
    while (pos + 8 <= bytes.size()) {
      uint64_t word;
      std::memcpy(&word, bytes.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos == bytes.size()) break;
    const Unit unit = next_unit(bytes, pos);
    if (unit.kind != Unit::kValid) return pos;
    pos += unit.size;
  }
  return bytes.size();
}

void append_repaired(std::string_view bytes, std::string& out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t valid_end = pos + first_invalid_offset(bytes.substr(pos));
    out.append(bytes.substr(pos, valid_end - pos));
    if (valid_end == bytes.size()) break;
    out.append(kReplacement);
    pos = valid_end + next_unit(bytes, valid_end).size;
  }
}

}  // namespace dsv4::utf8
