// StateSlots: the per-layer ring tensors of all slots, the free list, and a slot's views.
#include "model/state_slots.h"

#include <atomic>
#include <string>

#include "core/error.h"
#include "kv/packed_entries.h"
#include "model/cache_pool.h"

namespace dsv4 {

namespace {

std::atomic<uint64_t> next_slots_id{1};

// Overlapping compression (MODEL.md §4.3): CSA's ratio-4 blocks also see the block before.
int64_t compressor_overlap(int64_t ratio) { return ratio == 4 ? 2 : 1; }

// A tensor of `slots` slots of `shape`.
Shape slots_of(int64_t slots, const Shape& shape) {
  Shape s{slots};
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

// Slot `slot` of a tensor made by slots_of.
DeviceTensor slot_part(const DeviceTensor& all, int32_t slot) {
  const Shape one(all.shape().begin() + 1, all.shape().end());
  return all.part(slot * shape_numel(one), one);
}

}  // namespace

Shape StateSlots::compressor_ring_shape(int64_t ratio, int64_t dc) {
  const int64_t coff = compressor_overlap(ratio);
  return {coff * ratio, coff * dc};
}

StateSlots::StateSlots(Ops& ops, const ModelConfig& cfg, DType dtype, int64_t slots)
    : id_(next_slots_id++), dtype_(dtype), num_slots_(slots) {
  check_cache_dtype(ops, cfg, dtype);
  if (slots < 1 || slots > (int64_t{1} << 31) - 1)
    throw UsageError("state slots: " + std::to_string(slots) + " slots (need 1 to 2^31 - 1)");
  const ModelParams& p = cfg.params();
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l) {
    LayerRings r;
    r.ratio = cfg.compress_ratio(l);
    r.window =
        ops.alloc(cache_storage_dtype(dtype), slots_of(slots, {p.sliding_window, cache_stored_width(dtype, p.head_dim)}));
    if (r.ratio > 0) {
      r.kv = ops.alloc(DType::kF32, slots_of(slots, compressor_ring_shape(r.ratio, p.head_dim)));
      r.score = ops.alloc(DType::kF32, slots_of(slots, compressor_ring_shape(r.ratio, p.head_dim)));
    }
    if (cfg.layer_kind(l) == LayerKind::kCsa) {
      r.index_kv = ops.alloc(DType::kF32, slots_of(slots, compressor_ring_shape(r.ratio, p.index_head_dim)));
      r.index_score = ops.alloc(DType::kF32, slots_of(slots, compressor_ring_shape(r.ratio, p.index_head_dim)));
    }
    layers_.push_back(std::move(r));
  }
  for (int64_t s = 0; s < slots; ++s) free_.insert(static_cast<int32_t>(s));
}

int64_t StateSlots::layer_bytes(const ModelConfig& cfg, int64_t layer, DType dtype, bool compressors) {
  const ModelParams& p = cfg.params();
  int64_t bytes = p.sliding_window * cache_stored_width(dtype, p.head_dim) *
                  static_cast<int64_t>(dtype_size(cache_storage_dtype(dtype)));
  const int64_t m = cfg.compress_ratio(layer);
  const auto rings_bytes = [m](int64_t dc) {  // a compressor's two f32 rings
    return 2 * shape_numel(compressor_ring_shape(m, dc)) * static_cast<int64_t>(sizeof(float));
  };
  if (compressors && m > 0) bytes += rings_bytes(p.head_dim);
  if (compressors && cfg.layer_kind(layer) == LayerKind::kCsa) bytes += rings_bytes(p.index_head_dim);
  return bytes;
}

int64_t StateSlots::slot_bytes(const ModelConfig& cfg, DType dtype) {
  int64_t bytes = 0;
  for (int64_t l = 0; l < cfg.num_layers() + cfg.num_mtp_layers(); ++l) bytes += layer_bytes(cfg, l, dtype, true);
  return bytes;
}

int64_t StateSlots::free_slots() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(free_.size());
}

int32_t StateSlots::take() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (free_.empty())
    throw UsageError("state slots: all " + std::to_string(num_slots_) +
                     " are taken (a slot per running sequence: raise the sequence limit)");
  const int32_t slot = *free_.begin();
  free_.erase(free_.begin());
  return slot;
}

void StateSlots::give_back(int32_t slot) {
  check_slot(slot, "give back");
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!free_.insert(slot).second) throw UsageError("state slot " + std::to_string(slot) + " given back twice");
}

void StateSlots::check_slot(int32_t slot, const char* what) const {
  if (slot < 0 || slot >= num_slots_)
    throw UsageError(std::string("state slots: ") + what + " slot " + std::to_string(slot) + " of " +
                     std::to_string(num_slots_));
}

std::vector<LayerCache> StateSlots::layers(int32_t slot) const {
  check_slot(slot, "views of");
  std::vector<LayerCache> out;
  out.reserve(layers_.size());
  for (const LayerRings& r : layers_) {
    LayerCache c;
    c.ratio = r.ratio;
    c.window = slot_part(r.window, slot);
    if (!r.kv.empty()) c.compressor = {slot_part(r.kv, slot), slot_part(r.score, slot)};
    if (!r.index_kv.empty()) c.index_compressor = {slot_part(r.index_kv, slot), slot_part(r.index_score, slot)};
    out.push_back(std::move(c));
  }
  return out;
}

void StateSlots::poison(Ops& ops, int32_t slot) const {
  for (const LayerCache& c : layers(slot))
    for (const DeviceTensor* t : state_tensors(c))
      if (!t->empty()) fill_nan(ops, t->view());
}

StateSlot& StateSlot::operator=(StateSlot&& other) noexcept {
  if (this != &other) {
    give_back();
    slots_ = std::move(other.slots_);
    index_ = other.index_;
  }
  return *this;
}

void StateSlot::give_back() {
  if (slots_ == nullptr) return;
  slots_->give_back(index_);
  slots_.reset();
}

}  // namespace dsv4
