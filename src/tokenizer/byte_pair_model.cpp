// Byte-level BPE merging with a linked list of symbols and a min-heap of candidate merges:
// O(n log n) in the piece length, so long pieces (a run of 100k letters) stay cheap.
#include "tokenizer/byte_pair_model.h"

#include <queue>

namespace dsv4 {
namespace {

struct Symbol {
  int32_t id;
  int32_t prev;  // index of the previous live symbol, -1 for none
  int32_t next;  // index of the next live symbol, -1 for none
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t merged_id;
  // Orders a std::priority_queue as a min-heap on (rank, pos).
  bool operator<(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

}  // namespace

void BytePairModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(piece.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  std::priority_queue<Candidate> queue;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const Merge* merge = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({merge->rank, i, merge->merged_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // A candidate is stale when either side has changed since it was queued.
    const Merge* merge = find_merge(left.id, right.id);
    if (merge == nullptr || merge->merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = find_merge(symbols[left.prev].id, left.id)) {
        queue.push({m->rank, left.prev, m->merged_id});
      }
    }
    if (left.next >= 0) {
      if (const Merge* m = find_merge(left.id, symbols[left.next].id)) {
        queue.push({m->rank, top.pos, m->merged_id});
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace dsv4
