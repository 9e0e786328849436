// Slots of the per-sequence fixed-size state (MODEL.md §4.3, §8): every main and MTP layer's SWA
// window ring and compressor state rings, for up to `slots` sequences in one tensor per layer and
// kind. A sequence takes a slot for its life (StateSlot) and its LayerCache tensors are views of
// that slot's rows, so the buffers a forward's kernels read and write for a sequence are the
// slot's, not the sequence's: a decode step recorded as a CUDA graph for a set of slots replays
// for whichever sequences hold those slots next (SequenceCache::graph_key), as vLLM's state slots
// for recurrent layers do.
//
// A slot keeps its previous owner's rows; nothing is cleared when it is taken. The forward never
// depends on them: the rings are addressed by position and read only at positions the sequence
// has written, except when it resumes on a reused prefix, where the tokens it recomputes read the
// rows before the resume position, and the recomputation is long enough that no later number
// depends on what those rows held (MODEL.md §8.6; tests/model/test_state_slots fills a slot with
// NaN first and gets a fresh cache's bits).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "config/model_config.h"
#include "ops/ops.h"

namespace dsv4 {

// A compressor's partial state: the last coff*m tokens' kv and score + ape rows, fp32, the token
// at position p in row p % (coff*m).
struct CompressorState {
  DeviceTensor kv;     // [coff*m, coff*dc] f32
  DeviceTensor score;  // [coff*m, coff*dc] f32
};

// One sequence's fixed-size state of one layer.
struct LayerCache {
  int64_t ratio = 0;                   // the layer's compression ratio
  DeviceTensor window;                 // [W, d] kv rows after QAT, position p in row p % W (fp8
                                       // caches: u8 [W, 584] packed entries, one page of W)
  CompressorState compressor;          // ratio > 0
  CompressorState index_compressor;    // CSA layers
};

// A layer's five state tensors in one order (those the layer lacks are empty).
inline std::array<const DeviceTensor*, 5> state_tensors(const LayerCache& c) {
  return {&c.window, &c.compressor.kv, &c.compressor.score, &c.index_compressor.kv, &c.index_compressor.score};
}

class StateSlots {
 public:
  // State for `slots` sequences of cfg (main and MTP layers), the windows in cache dtype `dtype`
  // (kBF16, kF32 for exact-math forwards, or kF8E4M3's packed entries), the compressors' rings in
  // f32. UsageError for a dtype the caches do not hold or fewer than one slot.
  StateSlots(Ops& ops, const ModelConfig& cfg, DType dtype, int64_t slots);
  StateSlots(const StateSlots&) = delete;
  StateSlots& operator=(const StateSlots&) = delete;

  // The bytes of one slot: every layer's window ring in `dtype` and compressor rings.
  static int64_t slot_bytes(const ModelConfig& cfg, DType dtype);
  // Layer `layer`'s window ring in `dtype`, and with `compressors` its compressors' rings.
  static int64_t layer_bytes(const ModelConfig& cfg, int64_t layer, DType dtype, bool compressors);
  // The shape of each of a ratio-m compressor's two rings, compressed width dc.
  static Shape compressor_ring_shape(int64_t ratio, int64_t dc);

  // Unique among the slot sets this process made.
  uint64_t id() const { return id_; }
  DType dtype() const { return dtype_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_slots() const { return num_slots_; }
  int64_t free_slots() const;

  // Takes the lowest free slot (so that a steady set of sequences keeps the same slots); UsageError
  // naming the count when every slot is taken. Thread-safe.
  int32_t take();
  // Returns a taken slot.
  void give_back(int32_t slot);

  // Slot `slot`'s state, layer by layer: views of its rows.
  std::vector<LayerCache> layers(int32_t slot) const;

  // Fills slot `slot`'s rings with NaN (a canary: a forward that reads a ring row the sequence did
  // not write, a previous owner's, shows NaN in its output).
  void poison(Ops& ops, int32_t slot) const;

 private:
  struct LayerRings {
    int64_t ratio = 0;
    DeviceTensor window;                      // [slots, W, d]
    DeviceTensor kv, score;                   // [slots, coff*m, coff*d] (ratio > 0)
    DeviceTensor index_kv, index_score;       // [slots, coff*m, coff*dh] (CSA layers)
  };
  void check_slot(int32_t slot, const char* what) const;

  uint64_t id_;
  DType dtype_;
  int64_t num_slots_;
  std::vector<LayerRings> layers_;
  mutable std::mutex mutex_;
  std::set<int32_t> free_;
};

// A slot taken from a StateSlots for as long as the handle lives (a move hands it over).
class StateSlot {
 public:
  StateSlot() = default;
  explicit StateSlot(std::shared_ptr<StateSlots> slots) : slots_(std::move(slots)), index_(slots_->take()) {}
  StateSlot(const StateSlot&) = delete;
  StateSlot& operator=(const StateSlot&) = delete;
  StateSlot(StateSlot&& other) noexcept : slots_(std::move(other.slots_)), index_(other.index_) {}
  StateSlot& operator=(StateSlot&& other) noexcept;
  ~StateSlot() { give_back(); }

  const StateSlots& slots() const { return *slots_; }
  int32_t index() const { return index_; }

 private:
  void give_back();

  std::shared_ptr<StateSlots> slots_;
  int32_t index_ = -1;
};

}  // namespace dsv4
