// Safetensors reading and writing: the validating header parser, the mmap reader, checkpoint
// discovery (single file, indexed shards, or a folder of files) and the streaming writers.
#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"

namespace dsv4 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr const char* kIndexFileName = "model.safetensors.index.json";
constexpr uint64_t kLengthBytes = 8;  // the little-endian u64 header length that opens a file

std::string single_quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string os_error(int err) { return std::strerror(err); }

std::string offsets_str(const TensorInfo& t) {
  return "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
}

// A short rendering of a JSON value for error messages. Nested containers are elided, so a
// hostile header can make neither a huge message nor a deep (recursive) serialisation.
std::string excerpt(const json& value) {
  constexpr size_t kMaxChars = 80;
  std::string text;
  if (value.is_array()) {
    text = "[";
    for (const json& element : value) {
      if (text.size() > kMaxChars) break;
      if (text.size() > 1) text += ", ";
      text += element.is_array() ? "[...]" : element.is_object() ? "{...}" : element.dump();
    }
    text += "]";
  } else {
    text = value.is_object() ? "{...}" : value.dump();
  }
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

// ---- Header parsing ----

uint64_t read_le64(std::span<const std::byte> bytes) {
  uint64_t v = 0;
  for (size_t i = kLengthBytes; i-- > 0;) v = (v << 8) | std::to_integer<uint64_t>(bytes[i]);
  return v;
}

// Parses the JSON text, rejecting duplicate top-level keys (nlohmann would keep the last one
// silently, hiding a second definition of the same tensor).
json parse_header_json(std::string_view text, const std::string& file_name) {
  std::set<std::string> keys;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
        !keys.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    throw FormatError(file_name + ": header is not valid JSON: " + e.what());
  }
  if (!duplicate.empty())
    throw FormatError(file_name + ": header defines " + single_quoted(duplicate) +
                      " more than once");
  if (!header.is_object())
    throw FormatError(file_name + ": header is a JSON " + header.type_name() + ", not an object");
  return header;
}

bool is_non_negative_integer(const json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& file_name) {
  if (!j.is_object())
    throw FormatError(file_name + ": " + std::string(kMetadataKey) + " is a JSON " + j.type_name() +
                      ", not an object of strings");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      throw FormatError(file_name + ": " + std::string(kMetadataKey) + " entry " +
                        single_quoted(key) + " is a JSON " + value.type_name() + ", not a string");
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// Checks one tensor entry against the data section, which is `data_bytes` long.
TensorInfo parse_tensor_entry(const std::string& name, const json& entry, uint64_t data_bytes,
                              const std::string& file_name) {
  const std::string where = file_name + ": tensor " + single_quoted(name) + ": ";
  if (!entry.is_object())
    throw FormatError(where + "entry is a JSON " + std::string(entry.type_name()) +
                      ", not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) throw FormatError(where + "has no \"" + field + "\"");

  TensorInfo info;
  info.name = name;
  const json& dtype = entry.at("dtype");
  if (!dtype.is_string()) throw FormatError(where + "dtype is not a string: " + excerpt(dtype));
  const auto parsed_dtype = dtype_from_safetensors(dtype.get<std::string>());
  if (!parsed_dtype) throw FormatError(where + "unknown dtype " + excerpt(dtype));
  info.dtype = *parsed_dtype;

  // Every dimension fits int64, and so does the product of the non-zero ones times the element
  // size, so any partial product a caller computes (in any order) cannot overflow either.
  const json& shape = entry.at("shape");
  if (!shape.is_array()) throw FormatError(where + "shape is not an array: " + excerpt(shape));
  uint64_t nonzero_bytes = dtype_size(info.dtype);
  bool has_zero_dim = false;
  constexpr auto kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (const json& d : shape) {
    if (!is_non_negative_integer(d) || d.get<uint64_t>() > kMaxInt64)
      throw FormatError(where + "shape " + excerpt(shape) + " has an entry that is not a " +
                        "non-negative integer: " + excerpt(d));
    const uint64_t dim = d.get<uint64_t>();
    info.shape.push_back(static_cast<int64_t>(dim));
    if (dim == 0) {
      has_zero_dim = true;
    } else if (__builtin_mul_overflow(nonzero_bytes, dim, &nonzero_bytes) ||
               nonzero_bytes > kMaxInt64) {
      throw FormatError(where + "shape " + excerpt(shape) + " is too large");
    }
  }
  const uint64_t nbytes = has_zero_dim ? 0 : nonzero_bytes;

  const json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !is_non_negative_integer(offsets[0]) ||
      !is_non_negative_integer(offsets[1]))
    throw FormatError(where + "data_offsets " + excerpt(offsets) +
                      " is not two non-negative integers");
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  const std::string offsets_text = "data_offsets " + offsets_str(info);
  if (info.begin > info.end) throw FormatError(where + offsets_text + " has begin after end");
  if (info.end > data_bytes)
    throw FormatError(where + offsets_text + " out of range (data section is " +
                      std::to_string(data_bytes) + " bytes)");
  if (info.end - info.begin != nbytes)
    throw FormatError(where + offsets_text + " span " + std::to_string(info.end - info.begin) +
                      " bytes but " + std::string(safetensors_name(info.dtype).value()) + " " +
                      shape_str(info.shape) + " needs " + std::to_string(nbytes));
  return info;
}

// Sorts by begin offset and rejects two non-empty tensors sharing bytes. An empty tensor has no
// bytes, so it cannot overlap anything.
void sort_and_check_overlap(std::vector<TensorInfo>& tensors, const std::string& file_name) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin == t.end) continue;
    if (previous && t.begin < previous->end)
      throw FormatError(file_name + ": tensor " + single_quoted(t.name) + ": data_offsets " +
                        offsets_str(t) + " overlap those of tensor " +
                        single_quoted(previous->name) + " " + offsets_str(*previous));
    previous = &t;
  }
}

// ---- File I/O ----

// An open file descriptor, closed on destruction.
class Fd {
 public:
  Fd(const fs::path& path, int flags, mode_t mode = 0) : fd_(::open(path.c_str(), flags, mode)) {}
  ~Fd() { close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int close() {
    if (fd_ < 0) return 0;
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Appends to a new file through a buffer; large spans bypass the buffer. Every write is
// checked, so a full disk is an IoError naming the file, never a silently short file.
class BufferedFile {
 public:
  explicit BufferedFile(fs::path path)
      : path_(std::move(path)), fd_(path_, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) {
    if (!fd_.ok()) fail("cannot create");
    buffer_.reserve(kBufferBytes);
  }

  void append(std::span<const std::byte> bytes) {
    if (buffer_.size() + bytes.size() > kBufferBytes) flush();
    if (bytes.size() >= kBufferBytes) {
      write_all(bytes);
    } else {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
  }

  // Flushes, syncs to disk and closes; after this the file is complete.
  void close() {
    flush();
    if (::fsync(fd_.get()) != 0) fail("cannot sync");
    if (fd_.close() != 0) fail("cannot close");
  }

 private:
  static constexpr size_t kBufferBytes = 8u << 20;

  [[noreturn]] void fail(const std::string& what) const {
    throw IoError(path_.string() + ": " + what + ": " + os_error(errno));
  }

  void flush() {
    write_all(buffer_);
    buffer_.clear();
  }

  void write_all(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write failed");
      bytes = bytes.subspan(static_cast<size_t>(n));
    }
  }

  fs::path path_;
  Fd fd_;
  std::vector<std::byte> buffer_;
};

// Moves a complete temporary file to its final name.
void rename_file(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw IoError(to.string() + ": cannot rename " + from.string() + " to it: " + os_error(errno));
}

void remove_quietly(const fs::path& path) {
  std::error_code ignored;
  fs::remove(path, ignored);
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open: " + os_error(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError(path.string() + ": read failed");
  return text.str();
}

void write_text_file_atomically(const fs::path& path, const std::string& text) {
  fs::path partial = path;
  partial += ".partial";
  try {
    BufferedFile file(partial);
    file.append(std::as_bytes(std::span(text)));
    file.close();
    rename_file(partial, path);
  } catch (...) {
    remove_quietly(partial);
    throw;
  }
}

}  // namespace

// ---- parse_safetensors_header ----

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file_bytes,
                                           const std::string& file_name) {
  if (file_bytes.size() < kLengthBytes)
    throw FormatError(file_name + ": truncated: the file is " + std::to_string(file_bytes.size()) +
                      " bytes, too short for the 8-byte header length");
  const uint64_t header_bytes = read_le64(file_bytes);
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    throw FormatError(file_name + ": header length " + std::to_string(header_bytes) +
                      " exceeds the limit of " + std::to_string(kMaxSafetensorsHeaderBytes) +
                      " bytes");
  if (file_bytes.size() - kLengthBytes < header_bytes)
    throw FormatError(file_name + ": truncated: the header is " + std::to_string(header_bytes) +
                      " bytes but the file is only " + std::to_string(file_bytes.size()) +
                      " bytes");

  const auto* text = reinterpret_cast<const char*>(file_bytes.data() + kLengthBytes);
  const json header = parse_header_json({text, header_bytes}, file_name);

  SafetensorsHeader parsed;
  parsed.data_offset = kLengthBytes + header_bytes;
  const uint64_t data_bytes = file_bytes.size() - parsed.data_offset;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      parsed.metadata = parse_metadata(value, file_name);
    } else {
      parsed.tensors.push_back(parse_tensor_entry(key, value, data_bytes, file_name));
    }
  }
  sort_and_check_overlap(parsed.tensors, file_name);
  return parsed;
}

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  Fd fd(path, O_RDONLY | O_CLOEXEC);
  if (!fd.ok()) throw IoError(path.string() + ": cannot open: " + os_error(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw IoError(path.string() + ": cannot stat: " + os_error(errno));
  if (!S_ISREG(st.st_mode)) throw IoError(path.string() + ": not a regular file");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (map == MAP_FAILED) throw IoError(path.string() + ": cannot mmap: " + os_error(errno));
    map_ = static_cast<const std::byte*>(map);
  }
  try {
    header_ = parse_safetensors_header({map_, size_}, path.string());
  } catch (...) {
    if (map_) ::munmap(const_cast<std::byte*>(map_), size_);
    throw;
  }
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), size_);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

ConstTensorView SafetensorsFile::view(const TensorInfo& info) const {
  return {map_ + header_.data_offset + info.begin, info.dtype, info.shape};
}

// ---- Checkpoint ----

namespace {

// The shard names of model.safetensors.index.json's "weight_map", checked to be plain file
// names so that an index cannot reach outside its folder.
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  json index;
  try {
    index = json::parse(read_text_file(index_path));
  } catch (const json::exception& e) {
    throw FormatError(index_path.string() + ": not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw FormatError(index_path.string() + ": has no \"weight_map\" object");
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw FormatError(index_path.string() + ": weight_map entry for tensor " +
                        single_quoted(tensor) + " is not a file name: " + excerpt(shard));
    const std::string name = shard.get<std::string>();
    const fs::path as_path(name);
    if (name.empty() || as_path.filename() != as_path || name == "." || name == "..")
      throw FormatError(index_path.string() + ": tensor " + single_quoted(tensor) + ": shard " +
                        single_quoted(name) + " is not a file name inside " +
                        index_path.parent_path().string());
    weight_map.emplace(tensor, name);
  }
  return weight_map;
}

std::vector<fs::path> safetensors_files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && it->path().extension() == ".safetensors")
      files.push_back(it->path());
  if (ec) throw IoError(dir.string() + ": cannot list: " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

Checkpoint::Checkpoint(const fs::path& path) : path_(path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw IoError("checkpoint " + path.string() + " does not exist");

  if (!fs::is_directory(status)) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const TensorInfo& t : files_[0]->header().tensors) where_.emplace(t.name, Location{0, &t});
    return;
  }

  const fs::path index_path = path / kIndexFileName;
  if (fs::exists(index_path, ec)) {
    // Open each shard once, in name order, then check the index and the shards agree both ways.
    const std::map<std::string, std::string> weight_map = read_weight_map(index_path);
    std::map<std::string, size_t> shard_file;
    for (const auto& [tensor, shard] : weight_map) {
      if (shard_file.contains(shard)) continue;
      const fs::path shard_path = path / shard;
      if (!fs::exists(shard_path, ec))
        throw IoError(index_path.string() + ": shard " + shard_path.string() +
                      " (listed for tensor " + single_quoted(tensor) + ") does not exist");
      shard_file.emplace(shard, files_.size());
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
    }
    for (const auto& [tensor, shard] : weight_map) {
      const size_t file = shard_file.at(shard);
      const TensorInfo* info = files_[file]->find(tensor);
      if (!info)
        throw TensorError(index_path.string() + ": tensor " + single_quoted(tensor) +
                          " is listed in shard " + files_[file]->path().string() +
                          ", which does not hold it");
      where_.emplace(tensor, Location{file, info});
    }
    for (const auto& file : files_)
      for (const TensorInfo& t : file->header().tensors) {
        const auto listed = weight_map.find(t.name);
        if (listed == weight_map.end())
          throw FormatError(index_path.string() + ": shard " + file->path().string() +
                            " holds tensor " + single_quoted(t.name) +
                            ", which the weight_map does not list");
        if (path / listed->second != file->path())
          throw FormatError(index_path.string() + ": shard " + file->path().string() +
                            " holds tensor " + single_quoted(t.name) +
                            ", which the weight_map puts in " + listed->second);
      }
    return;
  }

  const std::vector<fs::path> paths = safetensors_files_in(path);
  if (paths.empty())
    throw IoError("checkpoint folder " + path.string() + " holds no .safetensors files");
  for (const fs::path& p : paths) {
    const size_t file = files_.size();
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    for (const TensorInfo& t : files_[file]->header().tensors) {
      const auto [it, inserted] = where_.emplace(t.name, Location{file, &t});
      if (!inserted)
        throw FormatError("tensor " + single_quoted(t.name) + " is in both " +
                          files_[it->second.file]->path().string() + " and " + p.string());
    }
  }
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, location] : where_) names.push_back(name);
  return names;
}

bool Checkpoint::contains(std::string_view name) const { return where_.find(name) != where_.end(); }

const Checkpoint::Location& Checkpoint::locate(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end())
    throw TensorError("tensor " + single_quoted(name) + " not found in checkpoint " +
                      path_.string());
  return it->second;
}

const TensorInfo& Checkpoint::info(std::string_view name) const { return *locate(name).info; }

const fs::path& Checkpoint::file_of(std::string_view name) const {
  return files_[locate(name).file]->path();
}

ConstTensorView Checkpoint::get(std::string_view name) const {
  const Location& location = locate(name);
  return files_[location.file]->view(*location.info);
}

ConstTensorView Checkpoint::get(std::string_view name, DType dtype, const Shape& shape) const {
  const Location& location = locate(name);
  const TensorInfo& info = *location.info;
  if (info.dtype != dtype || info.shape != shape)
    throw TensorError(files_[location.file]->path().string() + ": tensor " + single_quoted(name) +
                      ": expected " + std::string(dtype_name(dtype)) + " " + shape_str(shape) +
                      ", found " + std::string(dtype_name(info.dtype)) + " " +
                      shape_str(info.shape));
  return files_[location.file]->view(info);
}

// ---- SafetensorsWriter ----

namespace {

uint64_t spec_bytes(const TensorSpec& spec) {
  return static_cast<uint64_t>(shape_numel(spec.shape)) * dtype_size(spec.dtype);
}

// The header's dtype string; packed fp4 pairs are stored as I8, as DeepSeek's checkpoints do.
std::string_view stored_dtype_name(DType dtype) {
  return dtype == DType::kE2M1x2 ? "I8" : safetensors_name(dtype).value();
}

// Rejects specs no reader could accept: empty, reserved or repeated names, negative dimensions.
void check_specs(const std::vector<TensorSpec>& specs, const std::string& file_name) {
  std::set<std::string_view> names;
  for (const TensorSpec& spec : specs) {
    const std::string where = file_name + ": tensor " + single_quoted(spec.name) + ": ";
    if (spec.name.empty() || spec.name == kMetadataKey)
      throw UsageError(where + "is not a valid tensor name");
    if (!names.insert(spec.name).second) throw UsageError(where + "is listed more than once");
    for (int64_t d : spec.shape)
      if (d < 0)
        throw UsageError(where + "shape " + shape_str(spec.shape) + " has a negative dimension");
  }
}

// The JSON header, padded with spaces so the data section starts on an 8-byte boundary.
std::string header_text(const std::vector<TensorSpec>& specs,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& file_name) {
  json header = json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const TensorSpec& spec : specs) {
    const uint64_t end = offset + spec_bytes(spec);
    header[spec.name] = {{"dtype", stored_dtype_name(spec.dtype)},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw UsageError(file_name + ": cannot write the header: " + e.what());
  }
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');
  return text;
}

}  // namespace

struct SafetensorsWriter::Impl {
  fs::path path;
  fs::path partial_path;
  std::vector<TensorSpec> specs;
  std::unique_ptr<BufferedFile> file;
  size_t next = 0;
  bool finished = false;

  std::string where(std::string_view name) const {
    return path.string() + ": tensor " + single_quoted(name) + ": ";
  }
};

SafetensorsWriter::SafetensorsWriter(fs::path path, std::vector<TensorSpec> specs,
                                     std::map<std::string, std::string> metadata)
    : impl_(std::make_unique<Impl>()) {
  check_specs(specs, path.string());
  impl_->path = std::move(path);
  impl_->partial_path = impl_->path;
  impl_->partial_path += ".partial";
  impl_->specs = std::move(specs);
  const std::string header = header_text(impl_->specs, metadata, impl_->path.string());
  std::array<std::byte, kLengthBytes> length{};
  for (size_t i = 0; i < kLengthBytes; ++i)
    length[i] = static_cast<std::byte>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  impl_->file = std::make_unique<BufferedFile>(impl_->partial_path);
  try {
    impl_->file->append(length);
    impl_->file->append(std::as_bytes(std::span(header)));
  } catch (...) {
    impl_->file.reset();
    remove_quietly(impl_->partial_path);
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (impl_->finished) return;
  impl_->file.reset();
  remove_quietly(impl_->partial_path);
}

void SafetensorsWriter::write(std::string_view name, ConstTensorView data) {
  Impl& w = *impl_;
  if (w.finished) throw UsageError(w.where(name) + "written after finish()");
  if (w.next == w.specs.size())
    throw UsageError(w.where(name) + "written after all " + std::to_string(w.specs.size()) +
                     " tensors");
  const TensorSpec& spec = w.specs[w.next];
  if (name != spec.name)
    throw UsageError(w.where(name) + "written out of order; tensor " + single_quoted(spec.name) +
                     " comes next");
  if (data.dtype() != spec.dtype || data.shape() != spec.shape)
    throw UsageError(w.where(name) + "expected " + std::string(dtype_name(spec.dtype)) + " " +
                     shape_str(spec.shape) + ", given " + std::string(dtype_name(data.dtype())) +
                     " " + shape_str(data.shape()));
  if (data.nbytes() > 0 && data.bytes() == nullptr) throw UsageError(w.where(name) + "has no data");
  w.file->append({data.bytes(), data.nbytes()});
  ++w.next;
}

void SafetensorsWriter::finish() {
  Impl& w = *impl_;
  if (w.finished) throw UsageError(w.path.string() + ": finish() called twice");
  if (w.next != w.specs.size())
    throw UsageError(w.path.string() + ": finish() after " + std::to_string(w.next) + " of " +
                     std::to_string(w.specs.size()) + " tensors; tensor " +
                     single_quoted(w.specs[w.next].name) + " is next");
  w.file->close();
  rename_file(w.partial_path, w.path);
  w.finished = true;
}

// ---- ShardedWriter ----

struct ShardedWriter::Impl {
  struct Shard {
    std::string file_name;
    std::vector<TensorSpec> specs;
  };
  fs::path dir;
  std::vector<Shard> shards;
  uint64_t total_bytes = 0;
  size_t shard = 0;                           // the shard being written
  std::unique_ptr<SafetensorsWriter> writer;  // open while a shard is being written
  size_t written_in_shard = 0;
  bool finished = false;

  void open_next_shard() {
    writer =
        std::make_unique<SafetensorsWriter>(dir / shards[shard].file_name, shards[shard].specs);
  }
  void finish_shard() {
    writer->finish();
    writer.reset();
    written_in_shard = 0;
    ++shard;
  }
};

ShardedWriter::ShardedWriter(fs::path dir, std::vector<TensorSpec> specs, uint64_t max_shard_bytes)
    : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  check_specs(specs, dir.string());
  w.dir = std::move(dir);
  // Greedy packing in spec order; a tensor larger than the limit starts a shard of its own.
  uint64_t shard_bytes = 0;
  w.shards.emplace_back();
  for (TensorSpec& spec : specs) {
    const uint64_t bytes = spec_bytes(spec);
    if (!w.shards.back().specs.empty() && shard_bytes + bytes > max_shard_bytes) {
      w.shards.emplace_back();
      shard_bytes = 0;
    }
    shard_bytes += bytes;
    w.total_bytes += bytes;
    w.shards.back().specs.push_back(std::move(spec));
  }
  char name[64];
  for (size_t i = 0; i < w.shards.size(); ++i) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, w.shards.size());
    w.shards[i].file_name = name;
  }
  std::error_code ec;
  fs::create_directories(w.dir, ec);
  if (ec) throw IoError(w.dir.string() + ": cannot create folder: " + ec.message());
}

ShardedWriter::~ShardedWriter() {
  Impl& w = *impl_;
  if (w.finished) return;
  // Without an index the finished shards would pass for a complete folder of safetensors files.
  w.writer.reset();
  for (size_t i = 0; i < w.shard; ++i) remove_quietly(w.dir / w.shards[i].file_name);
}

void ShardedWriter::write(std::string_view name, ConstTensorView data) {
  Impl& w = *impl_;
  if (w.shard == w.shards.size())
    throw UsageError(w.dir.string() + ": tensor " + single_quoted(name) +
                     ": written after all tensors");
  if (!w.writer) w.open_next_shard();
  w.writer->write(name, data);
  if (++w.written_in_shard == w.shards[w.shard].specs.size()) w.finish_shard();
}

void ShardedWriter::finish() {
  Impl& w = *impl_;
  if (w.finished) throw UsageError(w.dir.string() + ": finish() called twice");
  if (w.shards.size() == 1 && w.shards[0].specs.empty() && w.shard == 0) {
    w.open_next_shard();
    w.finish_shard();
  }
  if (w.shard != w.shards.size())
    throw UsageError(w.dir.string() + ": finish() before every tensor was written; tensor " +
                     single_quoted(w.shards[w.shard].specs[w.written_in_shard].name) + " is next");
  json weight_map = json::object();
  for (const auto& shard : w.shards)
    for (const TensorSpec& spec : shard.specs) weight_map[spec.name] = shard.file_name;
  const json index = {{"metadata", {{"total_size", w.total_bytes}}}, {"weight_map", weight_map}};
  write_text_file_atomically(w.dir / kIndexFileName, index.dump(2) + "\n");
  w.finished = true;
}

uint64_t ShardedWriter::total_bytes() const { return impl_->total_bytes; }

size_t ShardedWriter::num_shards() const { return impl_->shards.size(); }

}  // namespace dsv4
