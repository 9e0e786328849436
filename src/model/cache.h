// Per-sequence state across forwards (MODEL.md §4.3, §8): for every layer the SWA window of the
// last W kv rows, the compressed entries, the indexer keys and the compressors' partial state.
//
// The CPU oracle keeps each sequence's caches contiguous and here, next to the model, because
// their layout is part of the math every op relies on (window position p in row p % W, entry j
// in row j, state rings by position). The Ops take these as per-sequence views, so a paged
// layout for the GPU engine (src/kv/) changes how the views are formed, not the model.
#pragma once

#include <cstdint>
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

struct LayerCache {
  DeviceTensor window;                 // [W, d] kv rows after QAT, position p in row p % W
  DeviceTensor compressed;             // [capacity / m, d] compressed entries (ratio > 0)
  CompressorState compressor;          // ratio > 0
  DeviceTensor index_keys;             // [capacity / 4, index_head_dim] (CSA layers)
  CompressorState index_compressor;    // CSA layers
};

class SequenceCache {
 public:
  // Room for `capacity` tokens. `dtype` stores the kv rows and entries: kBF16, or kF32 for
  // exact-math forwards.
  SequenceCache(Ops& ops, const ModelConfig& cfg, int64_t capacity, DType dtype);
  // A copy would share the buffers and let two sequences overwrite each other's state.
  SequenceCache(const SequenceCache&) = delete;
  SequenceCache& operator=(const SequenceCache&) = delete;
  SequenceCache(SequenceCache&&) = default;
  SequenceCache& operator=(SequenceCache&&) = default;

  int64_t capacity() const { return capacity_; }
  // Unique among the caches this process made (moves keep it): what a recorded forward
  // (CudaGraphForward) keys on, since the buffers its kernels write are this cache's.
  uint64_t id() const { return id_; }
  DType dtype() const { return dtype_; }
  // Tokens the main model has processed (the next token's position), and the MTP layers.
  int64_t length() const { return length_; }
  int64_t mtp_length() const { return mtp_length_; }

  // Layers 0..L-1 are the main layers, L.. the MTP layers.
  LayerCache& layer(int64_t index) { return layers_.at(static_cast<size_t>(index)); }
  const LayerCache& layer(int64_t index) const { return layers_.at(static_cast<size_t>(index)); }

  // Called by the model once a forward has written the caches for n more tokens (a recorded
  // forward that was never run takes them back with a negative n).
  void advance(int64_t n) { length_ += n; }
  void advance_mtp(int64_t n) { mtp_length_ += n; }

 private:
  int64_t capacity_;
  uint64_t id_;
  DType dtype_;
  int64_t length_ = 0;
  int64_t mtp_length_ = 0;
  std::vector<LayerCache> layers_;
};

}  // namespace dsv4
