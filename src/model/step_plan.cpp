// StepPlan: the batch's checks (moved here from ForwardContext so a graph replay checks too) and
// the i32 fields its ops read.
#include "model/step_plan.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace dsv4 {

StepPlan::Field StepPlan::append(const std::vector<int32_t>& values) {
  const Field f{static_cast<int64_t>(ints_.size()), static_cast<int64_t>(values.size())};
  ints_.insert(ints_.end(), values.begin(), values.end());
  return f;
}

StepPlan::StepPlan(const ModelConfig& cfg, const ForwardBatch& batch, bool mtp) {
  const int64_t T = batch.num_tokens();
  const bool exact = batch.options.exact_math;
  const DType act = forward_cache_dtype(exact);
  if (T == 0) throw UsageError("a forward needs at least one token");
  if (static_cast<int64_t>(batch.positions.size()) != T)
    throw UsageError("the batch has " + std::to_string(T) + " tokens but " + std::to_string(batch.positions.size()) +
                     " positions");
  int64_t begin = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& c = batch.sequences[s];
    const std::string which = "sequence " + std::to_string(s) + " of the batch";
    if (c.cache == nullptr) throw UsageError(which + " has no cache");
    if (c.num_tokens <= 0) throw UsageError(which + " has no tokens");
    const int64_t expected = mtp ? c.cache->mtp_length() : c.cache->length();
    if (c.start_pos != expected)
      throw UsageError(which + " starts at position " + std::to_string(c.start_pos) + " but its cache holds " +
                       std::to_string(expected) + " tokens");
    if (c.start_pos + c.num_tokens > c.cache->capacity())
      throw UsageError(which + " would grow to " + std::to_string(c.start_pos + c.num_tokens) +
                       " tokens, beyond its capacity of " + std::to_string(c.cache->capacity()));
    if (batch.table_positions > 0 && c.start_pos + c.num_tokens > batch.table_positions)
      throw UsageError(which + " reaches position " + std::to_string(c.start_pos + c.num_tokens - 1) +
                       ", beyond the batch's table_positions (" + std::to_string(batch.table_positions) + ")");
    if (c.start_pos + c.num_tokens > cfg.params().max_position_embeddings)
      throw UsageError(which + " would reach position " + std::to_string(c.start_pos + c.num_tokens - 1) +
                       ", beyond max_position_embeddings (" + std::to_string(cfg.params().max_position_embeddings) + ")");
    if (c.cache->dtype() != act && (exact || c.cache->dtype() != DType::kF8E4M3))
      throw UsageError(which + " has " + std::string(dtype_name(c.cache->dtype())) + " caches but the forward is " +
                       (exact ? "exact-math (needs f32)" : "default-mode (needs bf16 or fp8)"));
    for (size_t u = 0; u < s; ++u)
      if (batch.sequences[u].cache == c.cache) throw UsageError(which + " appears twice");
    if (begin + c.num_tokens > T) throw UsageError("the batch's sequences hold more tokens than token_ids");
    for (int64_t i = 0; i < c.num_tokens; ++i)
      if (batch.positions[static_cast<size_t>(begin + i)] != c.start_pos + i)
        throw UsageError(which + ": token " + std::to_string(i) + " has position " +
                         std::to_string(batch.positions[static_cast<size_t>(begin + i)]) + ", expected " +
                         std::to_string(c.start_pos + i));
    slices_.push_back({begin, c.num_tokens, c.start_pos});
    begin += c.num_tokens;
  }
  if (begin != T)
    throw UsageError("the batch's sequences hold " + std::to_string(begin) + " of its " + std::to_string(T) + " tokens");
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& c = batch.sequences[s];
    try {
      c.cache->reserve(c.start_pos + c.num_tokens);
    } catch (const UsageError& e) {
      throw UsageError("sequence " + std::to_string(s) + " of the batch: " + e.what());
    }
  }

  token_ids_ = append(batch.token_ids);
  positions_ = append(batch.positions);
  const int64_t W = cfg.params().sliding_window;
  std::vector<int32_t> window_rows;
  for (const SeqSlice& sl : slices_)
    for (int64_t i = 0; i < sl.num_tokens; ++i)
      window_rows.push_back(i >= sl.num_tokens - W ? static_cast<int32_t>((sl.start_pos + i) % W) : -1);
  window_rows_ = append(window_rows);

  std::set<int64_t> ratios;
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l)
    if (cfg.compress_ratio(l) > 0) ratios.insert(cfg.compress_ratio(l));
  for (const int64_t m : ratios) {
    std::vector<int32_t> rows, positions;
    for (size_t s = 0; s < slices_.size(); ++s) {
      const SeqSlice& sl = slices_[s];
      const int64_t first = sl.start_pos / m, end = sl.start_pos + sl.num_tokens;
      // A resumed sequence's entries of the reused prefix are another sequence's: not rewritten.
      const int64_t reused = mtp ? 0 : batch.sequences[s].cache->reused_tokens() / m;
      for (int64_t i = 0; i < compressor_block_rows(sl.num_tokens, m); ++i) {
        const int64_t j = first + i;
        const bool complete = (j + 1) * m <= end && j >= reused;
        rows.push_back(complete ? static_cast<int32_t>(j) : -1);
        positions.push_back(complete ? static_cast<int32_t>(j * m) : 0);
      }
    }
    entry_rows_[m] = append(rows);
    entry_positions_[m] = append(positions);
    for (const SequenceChunk& c : batch.sequences) {
      const std::vector<int32_t>& table = c.cache->block_table(m);
      size_t pages = table.size();
      if (batch.table_positions > 0) {
        const int64_t page_rows = c.cache->pool().pages(m).page_rows;
        pages = std::min(pages, static_cast<size_t>((batch.table_positions / m + page_rows - 1) / page_rows));
      }
      block_tables_[m].push_back(append(std::vector<int32_t>(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(pages))));
    }
  }
  one_page_table_ = append({0});
}

}  // namespace dsv4
