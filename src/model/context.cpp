// ForwardContext construction (validation of the batch against its caches) and block helpers.
#include "model/context.h"

#include "core/error.h"

namespace dsv4 {

ForwardContext::ForwardContext(Ops& ops_, const ModelConfig& cfg_, const ForwardBatch& batch_, bool mtp)
    : ops(ops_), cfg(cfg_), batch(batch_), T(batch_.num_tokens()) {
  const bool exact = batch.options.exact_math;
  act = exact ? DType::kF32 : DType::kBF16;
  fp8_act = exact ? ActQuant::kNone : ActQuant::kFp8Block128;
  qat = !exact;
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
    if (c.start_pos + c.num_tokens > cfg.params().max_position_embeddings)
      throw UsageError(which + " would reach position " + std::to_string(c.start_pos + c.num_tokens - 1) +
                       ", beyond max_position_embeddings (" + std::to_string(cfg.params().max_position_embeddings) + ")");
    if (c.cache->dtype() != act)
      throw UsageError(which + " has " + std::string(dtype_name(c.cache->dtype())) + " caches but the forward is " +
                       (exact ? "exact-math (needs f32)" : "default-mode (needs bf16)"));
    for (size_t u = 0; u < s; ++u)
      if (batch.sequences[u].cache == c.cache) throw UsageError(which + " appears twice");
    if (begin + c.num_tokens > T) throw UsageError("the batch's sequences hold more tokens than token_ids");
    for (int64_t i = 0; i < c.num_tokens; ++i)
      if (batch.positions[static_cast<size_t>(begin + i)] != c.start_pos + i)
        throw UsageError(which + ": token " + std::to_string(i) + " has position " +
                         std::to_string(batch.positions[static_cast<size_t>(begin + i)]) + ", expected " +
                         std::to_string(c.start_pos + i));
    slices.push_back({begin, c.num_tokens, c.start_pos});
    begin += c.num_tokens;
  }
  if (begin != T) throw UsageError("the batch's sequences hold " + std::to_string(begin) + " of its " +
                                   std::to_string(T) + " tokens");
  token_ids = ops.alloc(DType::kI32, {T});
  ops.upload(ConstTensorView(reinterpret_cast<const std::byte*>(batch.token_ids.data()), DType::kI32, {T}),
             token_ids.view());
  positions = ops.alloc(DType::kI32, {T});
  ops.upload(ConstTensorView(reinterpret_cast<const std::byte*>(batch.positions.data()), DType::kI32, {T}),
             positions.view());
}

DeviceTensor linear(const ForwardContext& ctx, const DeviceTensor& x, const Weight& w, DType out) {
  DeviceTensor y = ctx.alloc(out, {x.dim(0), w.shape.at(0)});
  const bool quantised = w.format != WeightFormat::kPlain;
  ctx.ops.linear({x.view(), &w, quantised ? ctx.fp8_act : ActQuant::kNone, y.view()});
  return y;
}

DeviceTensor rms_norm(const ForwardContext& ctx, const DeviceTensor& x, const Weight* weight) {
  DeviceTensor y = ctx.alloc(ctx.act, x.shape());
  ctx.ops.rms_norm({x.view(), weight, static_cast<float>(ctx.cfg->rms_norm_eps), y.view()});
  return y;
}

}  // namespace dsv4
