// Which tokens of a vocabulary may come next in a JSON object being generated (response_format
// json_object): a token is allowed when every byte it adds can follow the text so far
// (json_prefix.h). The sampler then draws among the allowed tokens only (sampler.h), so the
// output stays a prefix of one JSON object and the request can end when the object closes.
//
// Made once per vocabulary, with the tokens grouped by their first byte. allowed_tokens() runs on
// the host once per constrained sequence and step: a group whose first byte cannot follow is out
// at once; inside a string, tokens of plain string bytes only are in at once (if their characters
// fit a maxLength), and inside a string under a pattern such tokens need only the pattern's DFA;
// every other token is tried byte by byte from a copy of the state, stopping at
// the first byte that cannot follow.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/json_prefix.h"
#include "sampling/json_schema.h"

namespace dsv4 {

class JsonTokenMask {
 public:
  // token_bytes[id]: the bytes token `id` adds to the text. An empty entry is never allowed:
  // give special tokens (end of sequence included, since a constrained request ends when its
  // object closes) and ids without a token as empty.
  explicit JsonTokenMask(std::span<const std::string> token_bytes);

  // Sets allowed (resized to the vocabulary) to 1 for each token that can follow `prefix` and 0
  // for the others; returns how many are allowed (0 once the object is complete).
  size_t allowed_tokens(const JsonObjectPrefix& prefix, std::vector<uint8_t>& allowed) const;
  // The same under a schema (json_schema.h).
  size_t allowed_tokens(const JsonSchemaPrefix& prefix, std::vector<uint8_t>& allowed) const;

  // The bytes of token `id` (empty for a token never allowed). `id` must be < vocab_size().
  std::string_view bytes(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(offsets_.size()) - 1; }

  // The non-empty tokens sorted by their bytes, stored as a walk down a trie of the vocabulary
  // meets them: token k (id ids[k]) is the first shared[k] bytes of token k - 1 and then tail(k),
  // so a walk in this order starts each token from the state after the shared bytes
  // (regex_prefix.h). The tokens whose first byte is b are k in [groups[b], groups[b + 1]).
  struct ByteOrder {
    std::vector<int32_t> ids;
    std::vector<uint32_t> shared;
    std::string tails;                   // every tail, in order
    std::vector<uint32_t> tail_offsets;  // tail k is tails[tail_offsets[k], tail_offsets[k + 1])
    std::array<uint32_t, 257> groups{};
    std::string_view tail(size_t k) const {
      return std::string_view(tails).substr(tail_offsets[k], tail_offsets[k + 1] - tail_offsets[k]);
    }
  };
  const ByteOrder& byte_order() const { return byte_order_; }
  size_t max_token_bytes() const { return max_token_bytes_; }

 private:
  template <typename Prefix>
  size_t allowed(const Prefix& prefix, std::vector<uint8_t>& allowed) const;

  std::string bytes_;              // every token's bytes, in id order
  std::vector<uint32_t> offsets_;  // token id's bytes are [offsets_[id], offsets_[id + 1])
  std::vector<int32_t> by_first_byte_;         // the non-empty tokens' ids, by first byte
  std::array<uint32_t, 257> group_begin_{};    // first byte b's ids: [group_begin_[b], group_begin_[b + 1])
  // Per id: its characters (bytes but UTF-8 continuations) when every byte is >= 0x20 and neither
  // '"' nor '\', else kNotPlain.
  static constexpr uint16_t kNotPlain = UINT16_MAX;
  std::vector<uint16_t> plain_chars_;
  ByteOrder byte_order_;
  size_t max_token_bytes_ = 0;
};

}  // namespace dsv4
