// RegexDfa: interning NFA state sets as DFA states, and the transitions computed on demand.
#include "sampling/regex_dfa.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dsv4 {

RegexDfa::RegexDfa(std::shared_ptr<const RegexNfa> nfa, size_t max_states)
    : nfa_(std::move(nfa)), max_states_(std::max<size_t>(max_states, 2)) {
  if (!nfa_) throw UsageError("regex: no compiled pattern");
  classes_ = static_cast<size_t>(nfa_->num_byte_classes());
  intern({});  // kDead
  const int32_t from = nfa_->start();
  start_ = intern(nfa_->closure(std::span(&from, 1)));
}

int32_t RegexDfa::intern(std::vector<int32_t> set) {
  std::string key(set.size() * sizeof(int32_t), '\0');
  if (!set.empty()) std::memcpy(key.data(), set.data(), key.size());
  if (const auto found = index_.find(key); found != index_.end()) return found->second;
  if (sets_.size() >= max_states_) return kDead;
  const auto state = static_cast<int32_t>(sets_.size());
  index_.emplace(std::move(key), state);
  accepting_.push_back(nfa_->accepts(set));
  sets_.push_back(std::move(set));
  next_.resize(sets_.size() * classes_, state == kDead ? kDead : kUnknown);  // kDead goes nowhere else
  return state;
}

int32_t RegexDfa::add_transition(int32_t state, uint8_t byte, size_t at) {
  // A set refused for max_states_ is cached as kDead too: it would be refused again, the cache
  // only growing until compact() rebuilds it.
  const int32_t next = intern(nfa_->step(sets_[static_cast<size_t>(state)], byte));
  next_[at] = next;  // intern may have grown next_: index it afresh
  return next;
}

bool RegexDfa::can_continue(int32_t state) {
  for (int b = 0; b < 256; ++b)
    if (step(state, static_cast<uint8_t>(b)) != kDead) return true;
  return false;
}

void RegexDfa::compact(std::span<int32_t> keep) {
  std::vector<std::vector<int32_t>> kept_sets;
  for (const int32_t s : keep) kept_sets.push_back(sets_[static_cast<size_t>(s)]);
  std::vector<int32_t> start_set = sets_[static_cast<size_t>(start_)];
  sets_.clear();
  index_.clear();
  next_.clear();
  accepting_.clear();
  intern({});
  start_ = intern(std::move(start_set));
  for (size_t k = 0; k < keep.size(); ++k) keep[k] = intern(std::move(kept_sets[k]));
}

}  // namespace dsv4
