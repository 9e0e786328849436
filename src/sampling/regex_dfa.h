// A DFA built lazily from a RegexNfa (regex_nfa.h), for the regex constraints (regex_prefix.h, and
// a JSON schema's string `pattern`): each state is a set of NFA states, interned on first sight,
// and each transition is computed the first time it is taken and then cached per byte class, so a
// byte costs one table lookup once seen. State kDead is the empty set: no match can follow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "sampling/regex_nfa.h"

namespace dsv4 {

class RegexDfa {
 public:
  static constexpr int32_t kDead = 0;

  // `nfa` must not be null (UsageError). With `max_states`, a transition that would need a state
  // past that many leads to kDead instead (stricter than the pattern, never looser): a bound for a
  // DFA that cannot be compacted because copies of a cursor hold its state numbers.
  explicit RegexDfa(std::shared_ptr<const RegexNfa> nfa, size_t max_states = SIZE_MAX);

  const RegexNfa& nfa() const { return *nfa_; }
  // The state before any byte.
  int32_t start() const { return start_; }
  // The state after `byte` from `state`.
  int32_t step(int32_t state, uint8_t byte) {
    const size_t at = static_cast<size_t>(state) * classes_ + nfa_->byte_class()[byte];
    return next_[at] != kUnknown ? next_[at] : add_transition(state, byte, at);
  }
  // Whether the text that led to `state` is a whole match.
  bool is_match(int32_t state) const { return accepting_[static_cast<size_t>(state)]; }
  // Whether some byte leads from `state` to a state that is not kDead.
  bool can_continue(int32_t state);

  // The states cached now.
  size_t size() const { return sets_.size(); }
  // Drops every cached state but the start, kDead and `keep` (renumbered in place).
  void compact(std::span<int32_t> keep);

 private:
  static constexpr int32_t kUnknown = -1;  // a transition not computed yet

  int32_t add_transition(int32_t state, uint8_t byte, size_t at);
  // The state of a set of NFA states, added if new (kDead, uncached, when that would pass max_states_).
  int32_t intern(std::vector<int32_t> set);

  std::shared_ptr<const RegexNfa> nfa_;
  size_t max_states_;
  size_t classes_ = 1;
  std::vector<std::vector<int32_t>> sets_;          // state -> its NFA states (sorted)
  std::unordered_map<std::string, int32_t> index_;  // a set's bytes -> its state
  std::vector<int32_t> next_;                       // [state * classes_ + byte class] -> state
  std::vector<uint8_t> accepting_;                  // per state
  int32_t start_ = kDead;
};

}  // namespace dsv4
