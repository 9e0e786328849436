// Trie construction and the two-pass added-token split.
#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace dsv4 {

int32_t TokenTrie::child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[static_cast<size_t>(node)].children;
  const auto it = std::lower_bound(children.begin(), children.end(), byte,
                                   [](const auto& edge, uint8_t b) { return edge.first < b; });
  return it != children.end() && it->first == byte ? it->second : -1;
}

bool TokenTrie::insert(std::string_view content, int32_t id) {
  int32_t node = 0;
  for (const char c : content) {
    const auto byte = static_cast<uint8_t>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[static_cast<size_t>(node)].children;
      children.insert(std::lower_bound(children.begin(), children.end(), std::pair{byte, 0}),
                      {byte, next});
    }
    node = next;
  }
  starts_[static_cast<uint8_t>(content.front())] = true;
  auto& slot = nodes_[static_cast<size_t>(node)].id;
  if (slot >= 0) return false;
  slot = id;
  return true;
}

TokenTrie::Match TokenTrie::find(std::string_view text, size_t from) const {
  for (size_t begin = from; begin < text.size(); ++begin) {
    if (!starts_[static_cast<uint8_t>(text[begin])]) continue;
    Match best;
    int32_t node = 0;
    for (size_t pos = begin; pos < text.size(); ++pos) {
      node = child(node, static_cast<uint8_t>(text[pos]));
      if (node < 0) break;
      if (const int32_t id = nodes_[static_cast<size_t>(node)].id; id >= 0) {
        best = {begin, pos + 1, id};
      }
    }
    if (best.id >= 0) return best;
  }
  return {};
}

bool AddedTokenMatcher::add(std::string_view content, int32_t id, bool normalized) {
  return (normalized ? normalized_ : raw_).insert(content, id);
}

namespace {

// Appends the matches of `trie` in `text` and the text between them; plain text goes through
// `on_plain` so a second trie can split it further.
template <typename OnPlain>
void split_with(const TokenTrie& trie, std::string_view text, std::vector<TextSegment>& out,
                OnPlain&& on_plain) {
  size_t done = 0;
  while (done < text.size()) {
    const TokenTrie::Match match = trie.find(text, done);
    if (match.id < 0) break;
    if (match.begin > done) on_plain(text.substr(done, match.begin - done));
    out.push_back({text.substr(match.begin, match.end - match.begin), match.id});
    done = match.end;
  }
  if (done < text.size()) on_plain(text.substr(done));
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  split_with(raw_, text, out, [&](std::string_view plain) {
    split_with(normalized_, plain, out,
               [&](std::string_view rest) { out.push_back({rest, -1}); });
  });
}

}  // namespace dsv4
