// The output constraint of vLLM's guided_regex (structured_outputs.regex): the whole text must
// match a regular expression (regex_nfa.h says which syntax). A token may come next when the text
// so far plus its bytes is still the start of some match, the end of sequence when the text is a
// match; the request ends once the text is a match that no byte can extend.
//
// The text's position is a set of NFA states, interned as the state of a lazily built DFA whose
// transitions are cached (per byte class, at most kMaxCachedStates states kept between tokens), so
// a byte costs one table lookup once seen. allowed_tokens() walks the vocabulary in byte order
// (JsonTokenMask::byte_order), reusing the state after the bytes a token shares with the one
// before it, as a walk down a trie would, and skipping the tokens that begin with bytes that
// already failed; on the host, once per constrained sequence and step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sampling/json_token_mask.h"
#include "sampling/regex_nfa.h"

namespace dsv4 {

class RegexPrefix {
 public:
  // The lazy DFA's cache is cut back to the text's state when it grows past this many states.
  static constexpr size_t kMaxCachedStates = 4096;

  // `regex` must not be null (UsageError).
  explicit RegexPrefix(std::shared_ptr<const RegexNfa> regex);

  // Appends bytes; afterwards viable() says whether the text is still the start of a match.
  void advance(std::string_view bytes);
  bool viable() const { return current_ != kDead; }
  // Whether the text is a match.
  bool is_match() const { return accepting_[static_cast<size_t>(current_)]; }
  // Whether some byte keeps the text the start of a match.
  bool can_continue();

  // Sets allowed (resized to vocab's size) to 1 for each token after whose bytes the text is still
  // the start of a match, and for `eos_id` when `eos_allowed` and the text is a match; 0 for the
  // others. Returns how many are allowed. Not const: it fills the transition cache.
  size_t allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed, std::vector<uint8_t>& allowed);

  // The DFA states cached now (kMaxCachedStates plus at most a token's bytes after a walk).
  size_t cached_states() const { return sets_.size(); }

 private:
  static constexpr int32_t kDead = 0;      // the empty set of NFA states
  static constexpr int32_t kUnknown = -1;  // a transition not computed yet

  // The DFA state after `byte` from `state`.
  int32_t step(int32_t state, uint8_t byte) {
    const size_t at = static_cast<size_t>(state) * classes_ + regex_->byte_class()[byte];
    return next_[at] != kUnknown ? next_[at] : add_transition(state, byte, at);
  }
  int32_t add_transition(int32_t state, uint8_t byte, size_t at);
  int32_t intern(std::vector<int32_t> set);
  // Drops every cached state but `keep` (renumbered in place) and the dead one.
  void compact(std::span<int32_t> keep);

  std::shared_ptr<const RegexNfa> regex_;
  size_t classes_ = 1;
  std::vector<std::vector<int32_t>> sets_;             // DFA state -> its NFA states (sorted)
  std::unordered_map<std::string, int32_t> index_;     // a set's bytes -> its DFA state
  std::vector<int32_t> next_;                          // [state * classes_ + byte class] -> state
  std::vector<uint8_t> accepting_;                     // per DFA state
  int32_t current_ = kDead;                            // the text's state
  std::vector<int32_t> walk_;                          // allowed_tokens' states along a token's bytes
};

}  // namespace dsv4
