// Safetensors files: a validating header parser (also the fuzz target), an mmap reader for one
// file, a reader for a whole checkpoint (one file, or shards listed by
// model.safetensors.index.json), and a streaming writer for single and sharded checkpoints.
// Every error names the file and, where there is one, the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace dsv4 {

// One tensor's entry in a safetensors header. Offsets are relative to the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;             // sorted by begin offset
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" string map
  uint64_t data_offset = 0;                     // 8 + header length
};

// The largest header accepted (the format's own reference limit is 100 MB).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and checks a whole file image: header length, JSON, dtypes, shapes, offsets in range,
// non-overlapping, byte counts matching shape x dtype. Throws FormatError naming `file_name`
// and the tensor.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file_bytes,
                                           const std::string& file_name);

// A read-only memory-mapped safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  ConstTensorView view(const TensorInfo& info) const;

 private:
  std::filesystem::path path_;
  const std::byte* map_ = nullptr;
  size_t size_ = 0;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;
};

// A checkpoint: a folder with model.safetensors.index.json (shards), or a folder with
// safetensors files and no index, or one .safetensors file.
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> tensor_names() const;  // sorted
  size_t size() const { return where_.size(); }
  bool contains(std::string_view name) const;
  const TensorInfo& info(std::string_view name) const;                // TensorError if absent
  const std::filesystem::path& file_of(std::string_view name) const;  // TensorError if absent
  ConstTensorView get(std::string_view name) const;                   // TensorError if absent
  // Also checks dtype and shape; the TensorError names the file, tensor, expected and actual.
  ConstTensorView get(std::string_view name, DType dtype, const Shape& shape) const;

 private:
  struct Location {
    size_t file;
    const TensorInfo* info;
  };
  const Location& locate(std::string_view name) const;
  std::filesystem::path path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location, std::less<>> where_;
};

// What a writer is told up front about one tensor, so the header can be written first.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

// Writes one safetensors file: header first, then each tensor's bytes in the order of `specs`.
// Writes to "<path>.partial" and renames on finish(), so a crash never leaves a file that looks
// complete.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::filesystem::path path, std::vector<TensorSpec> specs,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  // removes the partial file if finish() was not reached
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next tensor, in spec order; its dtype, shape and name must match the spec.
  void write(std::string_view name, ConstTensorView data);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes a sharded checkpoint into `dir`: model-0000K-of-0000N.safetensors files of at most
// `max_shard_bytes` each (a larger tensor gets a shard of its own) plus
// model.safetensors.index.json. Tensors are written in `specs` order.
class ShardedWriter {
 public:
  ShardedWriter(std::filesystem::path dir, std::vector<TensorSpec> specs, uint64_t max_shard_bytes);
  ~ShardedWriter();
  ShardedWriter(const ShardedWriter&) = delete;
  ShardedWriter& operator=(const ShardedWriter&) = delete;

  void write(std::string_view name, ConstTensorView data);
  void finish();
  uint64_t total_bytes() const;
  size_t num_shards() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
