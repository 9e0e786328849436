// JsonTokenMask: the vocabulary's bytes in one buffer, the tokens grouped by first byte, and each
// group tried from the state after its first byte.
#include "sampling/json_token_mask.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/error.h"

namespace dsv4 {

namespace {

bool plain_string_byte(char c) { return static_cast<unsigned char>(c) >= 0x20 && c != '"' && c != '\\'; }

}  // namespace

JsonTokenMask::JsonTokenMask(std::span<const std::string> token_bytes) {
  offsets_.reserve(token_bytes.size() + 1);
  offsets_.push_back(0);
  plain_chars_.resize(token_bytes.size());
  std::array<uint32_t, 256> group_size{};
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const std::string& bytes = token_bytes[id];
    if (bytes_.size() + bytes.size() > std::numeric_limits<uint32_t>::max())
      throw UsageError("JsonTokenMask: the vocabulary's bytes pass 4 GiB");
    bytes_ += bytes;
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
    const bool plain = std::all_of(bytes.begin(), bytes.end(), plain_string_byte);
    const auto chars = std::count_if(bytes.begin(), bytes.end(), begins_character);
    plain_chars_[id] = plain && chars < kNotPlain ? static_cast<uint16_t>(chars) : kNotPlain;
    if (!bytes.empty()) ++group_size[static_cast<unsigned char>(bytes[0])];
  }
  for (size_t b = 0; b < 256; ++b) group_begin_[b + 1] = group_begin_[b] + group_size[b];
  by_first_byte_.resize(group_begin_[256]);
  std::array<uint32_t, 256> next = {};
  std::copy(group_begin_.begin(), group_begin_.end() - 1, next.begin());
  for (int32_t id = 0; id < vocab_size(); ++id)
    if (!bytes(id).empty()) by_first_byte_[next[static_cast<unsigned char>(bytes(id)[0])]++] = id;
  ByteOrder& order = byte_order_;
  order.ids = by_first_byte_;
  std::sort(order.ids.begin(), order.ids.end(),
            [&](int32_t a, int32_t b) { return bytes(a) < bytes(b) || (bytes(a) == bytes(b) && a < b); });
  order.groups = group_begin_;  // the same counts by first byte, in the same order
  order.shared.assign(order.ids.size(), 0);
  order.tail_offsets.assign(order.ids.size() + 1, 0);
  for (size_t k = 0; k < order.ids.size(); ++k) {
    const std::string_view token = bytes(order.ids[k]);
    max_token_bytes_ = std::max(max_token_bytes_, token.size());
    if (k > 0) {
      const std::string_view previous = bytes(order.ids[k - 1]);
      const auto [differs, ignored] = std::mismatch(token.begin(), token.end(), previous.begin(), previous.end());
      order.shared[k] = static_cast<uint32_t>(differs - token.begin());
    }
    order.tails += token.substr(order.shared[k]);
    order.tail_offsets[k + 1] = static_cast<uint32_t>(order.tails.size());
  }
}

std::string_view JsonTokenMask::bytes(int32_t id) const {
  const auto i = static_cast<size_t>(id);
  return std::string_view(bytes_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
}

size_t JsonTokenMask::allowed_tokens(const JsonObjectPrefix& prefix, std::vector<uint8_t>& allowed) const {
  return this->allowed(prefix, allowed);
}

size_t JsonTokenMask::allowed_tokens(const JsonSchemaPrefix& prefix, std::vector<uint8_t>& allowed) const {
  return this->allowed(prefix, allowed);
}

template <typename Prefix>
size_t JsonTokenMask::allowed(const Prefix& prefix, std::vector<uint8_t>& allowed) const {
  allowed.assign(static_cast<size_t>(vocab_size()), 0);
  size_t count = 0;
  const int64_t room = prefix.plain_string_room();  // -1: not in a plain string
  RegexDfa* pattern = nullptr;  // in a string under a pattern: plain tokens need only its DFA
  int32_t pattern_state = RegexDfa::kDead;
  if constexpr (std::is_same_v<Prefix, JsonSchemaPrefix>) pattern = prefix.plain_string_pattern(pattern_state);
  for (size_t b = 0; b < 256; ++b) {
    Prefix after_first = prefix;
    if (!after_first.advance(static_cast<char>(b))) continue;
    for (uint32_t i = group_begin_[b]; i < group_begin_[b + 1]; ++i) {
      const int32_t id = by_first_byte_[i];
      const uint16_t chars = plain_chars_[static_cast<size_t>(id)];
      const bool plain = room >= 0 && chars != kNotPlain;  // decided by its characters alone
      bool fits = plain && chars <= room;
      if (pattern && chars != kNotPlain) {
        int32_t state = pattern_state;
        for (const char c : bytes(id))
          if ((state = pattern->step(state, static_cast<uint8_t>(c))) == RegexDfa::kDead) break;
        fits = state != RegexDfa::kDead;
      } else if (!plain) {
        Prefix next = after_first;
        fits = next.advance(bytes(id).substr(1));
      }
      if (fits) {
        allowed[static_cast<size_t>(id)] = 1;
        ++count;
      }
    }
  }
  return count;
}

}  // namespace dsv4
