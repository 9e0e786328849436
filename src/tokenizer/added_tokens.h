// Added tokens (special and not) are cut out of the raw text before pre-tokenisation, as
// Hugging Face tokenizers does: first the tokens with normalized=false, then, in the text left
// between them, the tokens with normalized=true; at each step the leftmost match wins, and of
// the matches starting there the longest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

// A byte trie of token contents, for leftmost-longest matching.
class TokenTrie {
 public:
  // Adds `content` (non-empty) with `id`; returns false if the content is already present.
  bool insert(std::string_view content, int32_t id);

  struct Match {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;  // -1: no match
  };
  // The leftmost-longest match in text[from, text.size()).
  Match find(std::string_view text, size_t from) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t id = -1;                                    // token ending here, or -1
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{1};
  bool starts_[256] = {};  // bytes some content starts with
};

// One piece of the input after added-token extraction: either an added token or plain text.
struct TextSegment {
  std::string_view text;
  int32_t added_id;  // the added token's id, or -1 for plain text
};

class AddedTokenMatcher {
 public:
  // Returns false if `content` is already registered.
  bool add(std::string_view content, int32_t id, bool normalized);

  // Splits `text` into added tokens and the plain text between them, in order; empty plain
  // segments are dropped.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  TokenTrie raw_;         // normalized=false: matched on the input as given
  TokenTrie normalized_;  // normalized=true: matched after the (identity) normalizer
};

}  // namespace dsv4
