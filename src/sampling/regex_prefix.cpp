// The guided_regex constraint (see regex_prefix.h): the walk of the vocabulary.
#include "sampling/regex_prefix.h"

#include <algorithm>
#include <bit>

namespace dsv4 {

void RegexPrefix::bound_cache() {
  if (dfa_.size() <= kMaxCachedStates) return;
  dfa_.compact(std::span(&current_, 1));
  masks_.clear();
}

void RegexPrefix::advance(std::string_view bytes) {
  bound_cache();
  for (const char c : bytes) current_ = dfa_.step(current_, static_cast<uint8_t>(c));
}

bool RegexPrefix::can_continue() {
  bound_cache();
  return dfa_.can_continue(current_);
}

size_t RegexPrefix::allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed,
                                   std::vector<uint8_t>& allowed) {
  bound_cache();
  allowed.assign(static_cast<size_t>(vocab.vocab_size()), 0);
  const auto cached = std::find_if(masks_.begin(), masks_.end(),
                                   [&](const CachedMask& m) { return m.state == current_ && m.vocab == &vocab; });
  size_t count = 0;
  if (cached != masks_.end()) {
    for (size_t word = 0; word < cached->bits.size(); ++word)
      for (uint64_t bits = cached->bits[word]; bits != 0; bits &= bits - 1)
        allowed[word * 64 + static_cast<size_t>(std::countr_zero(bits))] = 1;
    count = cached->count;
  } else {
    std::vector<uint64_t> bits((allowed.size() + 63) / 64, 0);
    count = walk(vocab, allowed, bits);
    if (masks_.size() == kCachedMasks) masks_.erase(masks_.begin());
    masks_.push_back(CachedMask{current_, &vocab, std::move(bits), count});  // current_ as the walk left it
  }
  const bool eos_in_vocab = eos_id >= 0 && eos_id < vocab.vocab_size();
  if (eos_allowed && is_match() && eos_in_vocab && !allowed[static_cast<size_t>(eos_id)]) {
    allowed[static_cast<size_t>(eos_id)] = 1;
    ++count;
  }
  return count;
}

size_t RegexPrefix::walk(const JsonTokenMask& vocab, std::vector<uint8_t>& allowed, std::vector<uint64_t>& bits) {
  size_t count = 0;
  const JsonTokenMask::ByteOrder& order = vocab.byte_order();
  walk_.assign(vocab.max_token_bytes() + 1, RegexDfa::kDead);
  walk_[0] = current_;
  // walk_[0..valid] are the states after the previous token's first bytes; its bytes [0, dead_at)
  // lead to no match (none: it did not fail). A token is walked from its shared bytes on: they
  // are valid, since the previous token either went through them or failed past them. A first
  // byte that fails rules out its whole group.
  for (size_t first = 0; first < 256 && current_ != RegexDfa::kDead; ++first) {
    if (order.groups[first] == order.groups[first + 1] ||
        dfa_.step(current_, static_cast<uint8_t>(first)) == RegexDfa::kDead)
      continue;
    size_t valid = 0;
    size_t dead_at = SIZE_MAX;
    for (size_t k = order.groups[first]; k < order.groups[first + 1]; ++k) {
      if (dead_at <= order.shared[k]) continue;  // it begins with the bytes that failed
      size_t depth = order.shared[k];
      dead_at = SIZE_MAX;
      for (const char byte : order.tail(k)) {
        const int32_t next = dfa_.step(walk_[depth], static_cast<uint8_t>(byte));
        walk_[++depth] = next;
        if (next == RegexDfa::kDead) {
          dead_at = depth;
          break;
        }
      }
      valid = depth;
      if (dead_at == SIZE_MAX) {
        const auto id = static_cast<size_t>(order.ids[k]);
        allowed[id] = 1;
        bits[id / 64] |= uint64_t{1} << (id % 64);
        ++count;
      }
      if (dfa_.size() > kMaxCachedStates) {
        dfa_.compact(std::span(walk_).first(valid + 1));
        current_ = walk_[0];
        masks_.clear();
      }
    }
  }
  return count;
}

}  // namespace dsv4
