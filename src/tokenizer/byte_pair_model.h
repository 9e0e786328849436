// The BPE model of a byte-level tokenizer.json: every byte of a piece starts as its own symbol
// (the token of its byte-level character), then adjacent symbols are merged, lowest merge rank
// first and leftmost first among equal ranks, until no adjacent pair has a merge. This is the
// order Hugging Face's BPE applies (a min-heap on (rank, position)).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dsv4 {

class BytePairModel {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  BytePairModel() = default;
  // `byte_ids[b]`: the token of byte b alone.
  explicit BytePairModel(const std::array<int32_t, 256>& byte_ids) : byte_ids_(byte_ids) {}

  int32_t byte_id(uint8_t byte) const { return byte_ids_[byte]; }

  // Registers the merge of (left, right) into `merged_id` at `rank`; a later registration of the
  // same pair replaces the earlier one, as in Hugging Face.
  void add_merge(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
    merges_.insert_or_assign(pair_key(left, right), Merge{rank, merged_id});
  }

  // Appends the tokens of `piece` (any bytes, non-empty) to `out`.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const {
    const auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace dsv4
