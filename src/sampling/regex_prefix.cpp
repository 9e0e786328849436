// The guided_regex constraint (see regex_prefix.h): the lazy DFA and the vocabulary walk.
#include "sampling/regex_prefix.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dsv4 {

RegexPrefix::RegexPrefix(std::shared_ptr<const RegexNfa> regex) : regex_(std::move(regex)) {
  if (!regex_) throw UsageError("guided_regex: no compiled pattern");
  classes_ = static_cast<size_t>(regex_->num_byte_classes());
  intern({});  // kDead
  const int32_t start = regex_->start();
  current_ = intern(regex_->closure(std::span(&start, 1)));
}

int32_t RegexPrefix::intern(std::vector<int32_t> set) {
  std::string key(set.size() * sizeof(int32_t), '\0');
  if (!set.empty()) std::memcpy(key.data(), set.data(), key.size());
  const auto [it, added] = index_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
  if (added) {
    accepting_.push_back(regex_->accepts(set));
    sets_.push_back(std::move(set));
    next_.resize(sets_.size() * classes_, kUnknown);
    if (it->second == kDead) std::fill(next_.begin(), next_.end(), kDead);
  }
  return it->second;
}

int32_t RegexPrefix::add_transition(int32_t state, uint8_t byte, size_t at) {
  const int32_t next = intern(regex_->step(sets_[static_cast<size_t>(state)], byte));
  next_[at] = next;  // intern may have grown next_: index it afresh
  return next;
}

void RegexPrefix::compact(std::span<int32_t> keep) {
  std::vector<std::vector<int32_t>> kept_sets;
  for (const int32_t s : keep) kept_sets.push_back(sets_[static_cast<size_t>(s)]);
  sets_.clear();
  index_.clear();
  next_.clear();
  accepting_.clear();
  intern({});
  for (size_t k = 0; k < keep.size(); ++k) keep[k] = intern(std::move(kept_sets[k]));
}

void RegexPrefix::advance(std::string_view bytes) {
  if (sets_.size() > kMaxCachedStates) compact(std::span(&current_, 1));
  for (const char c : bytes) current_ = step(current_, static_cast<uint8_t>(c));
}

bool RegexPrefix::can_continue() {
  if (sets_.size() > kMaxCachedStates) compact(std::span(&current_, 1));
  for (int b = 0; b < 256; ++b)
    if (step(current_, static_cast<uint8_t>(b)) != kDead) return true;
  return false;
}

size_t RegexPrefix::allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed,
                                   std::vector<uint8_t>& allowed) {
  if (sets_.size() > kMaxCachedStates) compact(std::span(&current_, 1));
  allowed.assign(static_cast<size_t>(vocab.vocab_size()), 0);
  size_t count = 0;
  const JsonTokenMask::ByteOrder& order = vocab.byte_order();
  walk_.assign(vocab.max_token_bytes() + 1, kDead);
  walk_[0] = current_;
  // walk_[0..valid] are the states after the previous token's first bytes; its bytes [0, dead_at)
  // lead to no match (none: it did not fail). A token is walked from its shared bytes on: they
  // are valid, since the previous token either went through them or failed past them. A first
  // byte that fails rules out its whole group.
  for (size_t first = 0; first < 256 && current_ != kDead; ++first) {
    if (order.groups[first] == order.groups[first + 1] || step(current_, static_cast<uint8_t>(first)) == kDead) continue;
    size_t valid = 0;
    size_t dead_at = SIZE_MAX;
    for (size_t k = order.groups[first]; k < order.groups[first + 1]; ++k) {
      if (dead_at <= order.shared[k]) continue;  // it begins with the bytes that failed
      size_t depth = order.shared[k];
      dead_at = SIZE_MAX;
      for (const char byte : order.tail(k)) {
        const int32_t next = step(walk_[depth], static_cast<uint8_t>(byte));
        walk_[++depth] = next;
        if (next == kDead) {
          dead_at = depth;
          break;
        }
      }
      valid = depth;
      if (dead_at == SIZE_MAX) {
        allowed[static_cast<size_t>(order.ids[k])] = 1;
        ++count;
      }
      if (sets_.size() > kMaxCachedStates) {
        compact(std::span(walk_).first(valid + 1));
        current_ = walk_[0];
      }
    }
  }
  if (eos_allowed && is_match() && eos_id >= 0 && eos_id < vocab.vocab_size() && !allowed[static_cast<size_t>(eos_id)]) {
    allowed[static_cast<size_t>(eos_id)] = 1;
    ++count;
  }
  return count;
}

}  // namespace dsv4
