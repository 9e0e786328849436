// The output constraint of vLLM's guided_regex (structured_outputs.regex): the whole text must
// match a regular expression (regex_nfa.h says which syntax). A token may come next when the text
// so far plus its bytes is still the start of some match, the end of sequence when the text is a
// match; the request ends once the text is a match that no byte can extend.
//
// The text's position is a state of a lazily built DFA (regex_dfa.h), cut back to the text's state
// when it grows past kMaxCachedStates. allowed_tokens() walks the vocabulary in byte order
// (JsonTokenMask::byte_order), reusing the state after the bytes a token shares with the one
// before it, as a walk down a trie would, and skipping the tokens that begin with bytes that
// already failed; on the host, once per constrained sequence and step. The masks of the last
// kCachedMasks states are kept as bitsets: a pattern that returns to a state (`.*`, `[a-z ]+`)
// gets its mask again without the walk.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "sampling/json_token_mask.h"
#include "sampling/regex_dfa.h"
#include "sampling/regex_nfa.h"

namespace dsv4 {

class RegexPrefix {
 public:
  // The DFA's cache is cut back to the text's state when it grows past this many states.
  static constexpr size_t kMaxCachedStates = 4096;
  static constexpr size_t kCachedMasks = 4;  // 16 KiB each on DeepSeek-V4's vocabulary

  // `regex` must not be null (UsageError).
  explicit RegexPrefix(std::shared_ptr<const RegexNfa> regex) : dfa_(std::move(regex)), current_(dfa_.start()) {}

  // Appends bytes; afterwards viable() says whether the text is still the start of a match.
  void advance(std::string_view bytes);
  bool viable() const { return current_ != RegexDfa::kDead; }
  // Whether the text is a match.
  bool is_match() const { return dfa_.is_match(current_); }
  // Whether some byte keeps the text the start of a match.
  bool can_continue();

  // Sets allowed (resized to vocab's size) to 1 for each token after whose bytes the text is still
  // the start of a match, and for `eos_id` when `eos_allowed` and the text is a match; 0 for the
  // others. Returns how many are allowed. Not const: it fills the transition cache and keeps the
  // mask, for `vocab` (the same vocabulary while the prefix lives, as the engine's is).
  size_t allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed, std::vector<uint8_t>& allowed);

  // The DFA states cached now (kMaxCachedStates plus at most a token's bytes after a walk).
  size_t cached_states() const { return dfa_.size(); }

 private:
  // Cuts the cache back to the text's state once it is past kMaxCachedStates.
  void bound_cache();
  // Sets the allowed tokens in `allowed` (sized, all 0) and `bits` (one per token, all 0) by
  // walking the vocabulary; returns how many are allowed.
  size_t walk(const JsonTokenMask& vocab, std::vector<uint8_t>& allowed, std::vector<uint64_t>& bits);

  // A state's mask (the end of sequence aside) over one vocabulary, one bit per token.
  struct CachedMask {
    int32_t state = RegexDfa::kDead;
    const JsonTokenMask* vocab = nullptr;
    std::vector<uint64_t> bits;
    size_t count = 0;
  };

  RegexDfa dfa_;
  int32_t current_;             // the text's state
  std::vector<int32_t> walk_;  // allowed_tokens' states along a token's bytes
  std::vector<CachedMask> masks_;  // the newest last; cleared when the DFA's states are renumbered
};

}  // namespace dsv4
