// The plan of one forward (ARCHITECTURE.md idea 7, plan then run): everything its ops read that
// the host knows before the first op, as one array of i32 that is uploaded in one copy. The
// batch is checked against its caches here, once, and each sequence takes the cache pages its
// new tokens need (SequenceCache::reserve). A CUDA graph of a decode step is replayed by
// uploading the next step's plan into the buffer it was captured with (ForwardBatch::planned):
// the ops' arguments never change between steps, only these values (block tables included).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "config/model_config.h"
#include "model/forward_batch.h"
#include "ops/ops.h"

namespace dsv4 {

class StepPlan {
 public:
  // Where a field lies in ints().
  struct Field {
    int64_t offset = 0;
    int64_t size = 0;
  };

  // Checks the batch (tokens, positions, caches' lengths, capacities and dtypes), takes the cache
  // pages its tokens need and plans it; `mtp` picks which length the sequences' start positions
  // must match. UsageError names the sequence and the problem (an exhausted pool included).
  StepPlan(const ModelConfig& cfg, const ForwardBatch& batch, bool mtp);

  const std::vector<int32_t>& ints() const { return ints_; }
  const std::vector<SeqSlice>& slices() const { return slices_; }
  int64_t num_tokens() const { return token_ids_.size; }

  Field token_ids() const { return token_ids_; }       // [T]
  Field positions() const { return positions_; }       // [T]
  // [T] the row of its sequence's window ring each token's kv goes to (position % W), or -1 for
  // tokens followed by W more of their sequence in the batch (their rows would be overwritten).
  Field window_rows() const { return window_rows_; }
  // For a compression ratio m of the model, one value per compressor block row (each sequence's
  // compressor_block_rows(n, m) rows, sequence by sequence, the layout CompressorPoolParams::out
  // has): the entry's index in the sequence's compressed cache, or -1 for a block the batch does
  // not complete or one of the prefix the sequence resumed on (reused_tokens, not rewritten); and
  // the entry's position (its block's first, 0 for -1 rows) for its RoPE.
  Field entry_rows(int64_t ratio) const { return entry_rows_.at(ratio); }
  Field entry_positions(int64_t ratio) const { return entry_positions_.at(ratio); }
  // Sequence s's block table for compression ratio m (SequenceCache::block_table: a fixed size
  // per sequence, -1 for pages not taken; only the pages of positions below
  // ForwardBatch::table_positions where that is set), for the PagedCache of its compressed
  // entries and indexer keys.
  Field block_table(int64_t ratio, size_t seq) const { return block_tables_.at(ratio).at(seq); }
  // [1] = {0}: the block table of a cache that is one page, the window rings' writes.
  Field one_page_table() const { return one_page_table_; }

 private:
  Field append(const std::vector<int32_t>& values);

  std::vector<int32_t> ints_;
  std::vector<SeqSlice> slices_;
  Field token_ids_, positions_, window_rows_, one_page_table_;
  std::map<int64_t, Field> entry_rows_, entry_positions_;
  std::map<int64_t, std::vector<Field>> block_tables_;  // per ratio, per sequence
};

}  // namespace dsv4
