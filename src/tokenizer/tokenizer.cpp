// tokenizer.json loading (with the checks that name the file and field) and the encode /
// decode pipelines; the pieces live in added_tokens, pre_tokenizer and byte_pair_model.
#include "tokenizer/tokenizer.h"

#include <array>
#include <fstream>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/byte_pair_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, DEL, NBSP, soft hyphen) for the code points 256, 257, ... in byte order.
std::array<char32_t, 256> byte_level_chars() {
  std::array<char32_t, 256> chars{};
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    chars[b] = printable ? static_cast<char32_t>(b) : next_extra++;
  }
  return chars;
}

// UTF-8 of a code point below U+10000 (the byte-level alphabet ends at U+0143).
std::string utf8_of(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

// The inverse of byte_level_chars().
const std::unordered_map<char32_t, uint8_t>& byte_level_bytes() {
  static const auto map = [] {
    std::unordered_map<char32_t, uint8_t> bytes;
    const auto chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) bytes.emplace(chars[b], static_cast<uint8_t>(b));
    return bytes;
  }();
  return map;
}

// The bytes a token string decodes to under Hugging Face's ByteLevel decoder: each character of
// the byte-level alphabet gives its byte; a token with any other character (an added token
// such as "<｜User｜>") gives its own UTF-8 unchanged.
std::string token_string_bytes(std::string_view token) {
  const auto& byte_of_char = byte_level_bytes();
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const utf8::Unit unit = utf8::next_unit(token, pos);
    if (unit.kind != utf8::Unit::kValid) return std::string(token);
    const auto* p = reinterpret_cast<const uint8_t*>(token.data()) + pos;
    char32_t c = unit.size == 1 ? p[0] : p[0] & (0xFF >> (unit.size + 1));
    for (size_t i = 1; i < unit.size; ++i) c = (c << 6) | (p[i] & 0x3F);
    const auto it = byte_of_char.find(c);
    if (it == byte_of_char.end()) return std::string(token);
    bytes += static_cast<char>(it->second);
    pos += unit.size;
  }
  return bytes;
}

// Reads fields of the parsed file; every failure names the file and the field's path.
class FieldReader {
 public:
  explicit FieldReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw FormatError(file_ + ": field '" + field + "' " + what);
  }

  const json& required(const json& object, const std::string& key, const std::string& path,
                       json::value_t type) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(path, "is missing");
    if (!(it->type() == type ||
          (type == json::value_t::number_integer && it->is_number_unsigned()))) {
      fail(path, std::string("must be a ") + type_name(type) + ", not " + it->type_name());
    }
    return *it;
  }

  // A field that may be absent or null; when present it must have `type`.
  const json* optional(const json& object, const std::string& key, const std::string& path,
                       json::value_t type) const {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &required(object, key, path, type);
  }

  bool flag(const json& object, const std::string& key, const std::string& path) const {
    const json* value = optional(object, key, path, json::value_t::boolean);
    return value != nullptr && value->get<bool>();
  }

  std::string string(const json& object, const std::string& key, const std::string& path) const {
    return required(object, key, path, json::value_t::string).get<std::string>();
  }

  const std::string& file() const { return file_; }

 private:
  static const char* type_name(json::value_t type) {
    switch (type) {
      case json::value_t::object: return "object";
      case json::value_t::array: return "array";
      case json::value_t::string: return "string";
      case json::value_t::boolean: return "boolean";
      case json::value_t::number_integer: return "integer";
      default: return "value";
    }
  }

  std::string file_;
};

constexpr size_t kMaxCachedPieceBytes = 256;
constexpr size_t kWordCacheCapacity = 1 << 16;

// Piece bytes -> ids, shared by all threads; filled until full, then only read.
class WordCache {
 public:
  bool find(std::string_view piece, std::vector<int32_t>& out) const {
    std::shared_lock lock(mutex_);
    const auto it = map_.find(piece);
    if (it == map_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view piece, std::span<const int32_t> ids) {
    std::unique_lock lock(mutex_);
    if (map_.size() < kWordCacheCapacity) {
      map_.try_emplace(std::string(piece), ids.begin(), ids.end());
    }
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map_;
};

// What each id decodes to, and what kind of token it is, indexed by id.
class TokenTable {
 public:
  using Kind = Tokenizer::TokenKind;

  void set(int32_t id, std::string bytes, Kind kind) {
    if (static_cast<size_t>(id) >= bytes_.size()) {
      bytes_.resize(static_cast<size_t>(id) + 1);
      kinds_.resize(static_cast<size_t>(id) + 1, Kind::kNone);
    }
    bytes_[id] = std::move(bytes);
    kinds_[id] = kind;
  }

  const std::string& bytes(int32_t id) const {
    if (kind(id) == Kind::kNone) {
      throw UsageError("token id " + std::to_string(id) + " names no token (vocabulary size " +
                       std::to_string(kinds_.size()) + ")");
    }
    return bytes_[id];
  }

  Kind kind(int32_t id) const {
    return id < 0 || static_cast<size_t>(id) >= kinds_.size() ? Kind::kNone : kinds_[id];
  }

  size_t size() const { return kinds_.size(); }

 private:
  std::vector<std::string> bytes_;
  std::vector<Kind> kinds_;
};

}  // namespace

struct Tokenizer::Impl {
  AddedTokenMatcher added;
  std::unordered_map<std::string, int32_t> added_ids;  // content -> id
  PreTokenizer pre_tokenizer;
  BytePairModel model;
  TokenTable tokens;
  mutable WordCache cache;

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.size() == 1) {
      out.push_back(model.byte_id(static_cast<uint8_t>(piece[0])));
      return;
    }
    if (piece.size() > kMaxCachedPieceBytes) {
      model.encode(piece, out);
      return;
    }
    if (cache.find(piece, out)) return;
    const size_t first = out.size();
    model.encode(piece, out);
    cache.insert(piece, std::span(out).subspan(first));
  }
};

namespace {

void load_normalizer(const json& root, const FieldReader& reader) {
  const json* normalizer = reader.optional(root, "normalizer", "normalizer", json::value_t::object);
  if (normalizer == nullptr) return;
  const std::string type = reader.string(*normalizer, "type", "normalizer.type");
  if (type != "Sequence" ||
      !reader.required(*normalizer, "normalizers", "normalizer.normalizers", json::value_t::array)
           .empty()) {
    reader.fail("normalizer", "is not supported (only null or an empty Sequence is)");
  }
}

void load_split(const json& step, const std::string& path, const FieldReader& reader,
                PreTokenizer& pre_tokenizer) {
  const json& pattern = reader.required(step, "pattern", path + ".pattern", json::value_t::object);
  const bool literal = pattern.contains("String");
  const std::string kind = literal ? "String" : "Regex";
  const std::string text = reader.string(pattern, kind, path + ".pattern." + kind);
  if (reader.string(step, "behavior", path + ".behavior") != "Isolated") {
    reader.fail(path + ".behavior", "is not supported (only \"Isolated\" is)");
  }
  if (reader.flag(step, "invert", path + ".invert")) {
    reader.fail(path + ".invert", "is not supported (only false is)");
  }
  pre_tokenizer.add(RegexSplit(text, literal, reader.file() + ": field '" + path + ".pattern'"));
}

void check_byte_level(const json& step, const std::string& path, const FieldReader& reader) {
  for (const char* key : {"add_prefix_space", "use_regex"}) {
    if (reader.flag(step, key, path + "." + key)) {
      reader.fail(path + "." + key, "is not supported (only false is)");
    }
  }
}

void load_pre_tokenizer(const json& root, const FieldReader& reader, PreTokenizer& out) {
  const json& pre = reader.required(root, "pre_tokenizer", "pre_tokenizer", json::value_t::object);
  std::vector<std::pair<const json*, std::string>> steps;
  if (reader.string(pre, "type", "pre_tokenizer.type") == "Sequence") {
    const json& list =
        reader.required(pre, "pretokenizers", "pre_tokenizer.pretokenizers", json::value_t::array);
    for (size_t i = 0; i < list.size(); ++i) {
      steps.emplace_back(&list[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
    }
  } else {
    steps.emplace_back(&pre, "pre_tokenizer");
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, path] = steps[i];
    if (!step->is_object()) reader.fail(path, "must be an object");
    const std::string type = reader.string(*step, "type", path + ".type");
    const bool last = i + 1 == steps.size();
    if (type == "Split" && !last) {
      load_split(*step, path, reader, out);
    } else if (type == "ByteLevel" && last) {
      check_byte_level(*step, path, reader);
    } else {
      reader.fail(path + ".type", "'" + type + "' is not supported here (Split steps, then " +
                                      "one ByteLevel last)");
    }
  }
}

// unk_token and byte_fallback are not read: they act only on a character missing from the
// vocabulary, and load_model requires all 256 byte-level characters to be there.
void check_model_options(const json& model, const FieldReader& reader) {
  if (const auto dropout = model.find("dropout");
      dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    reader.fail("model.dropout", "is not supported (only null or 0 is)");
  }
  if (reader.flag(model, "ignore_merges", "model.ignore_merges")) {
    reader.fail("model.ignore_merges", "is not supported (only false is)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* affix = reader.optional(model, key, std::string("model.") + key,
                                        json::value_t::string);
    if (affix != nullptr && !affix->get<std::string>().empty()) {
      reader.fail(std::string("model.") + key, "is not supported (only null is)");
    }
  }
}

// Splits a merge entry ("a b" or ["a", "b"]) into its two token strings.
std::pair<std::string, std::string> merge_parts(const json& entry, const std::string& path,
                                                const FieldReader& reader) {
  if (entry.is_string()) {
    const std::string& text = entry.get_ref<const std::string&>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      reader.fail(path, "= \"" + text + "\" is not two tokens separated by one space");
    }
    return {text.substr(0, space), text.substr(space + 1)};
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  }
  reader.fail(path, "must be a string \"a b\" or an array of two strings");
}

// Reads model.vocab and model.merges into `model` and `tokens`; returns the vocabulary.
std::unordered_map<std::string, int32_t> load_model(const json& root, const FieldReader& reader,
                                                    BytePairModel& bpe, TokenTable& tokens) {
  const json& model = reader.required(root, "model", "model", json::value_t::object);
  const std::string type = reader.string(model, "type", "model.type");
  if (type != "BPE") reader.fail("model.type", "'" + type + "' is not supported (only BPE is)");
  check_model_options(model, reader);

  const json& vocab = reader.required(model, "vocab", "model.vocab", json::value_t::object);
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    const std::string path = "model.vocab[\"" + token + "\"]";
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() >= INT32_MAX) {
      reader.fail(path, "must be a non-negative 32-bit integer id");
    }
    ids.emplace(token, id_json.get<int32_t>());
  }

  const std::array<char32_t, 256> chars = byte_level_chars();
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(utf8_of(chars[b]));
    if (it == ids.end()) {
      reader.fail("model.vocab", "lacks the byte-level token \"" + utf8_of(chars[b]) +
                                     "\" of byte " + std::to_string(b));
    }
    byte_ids[b] = it->second;
  }
  bpe = BytePairModel(byte_ids);

  const json& merges = reader.required(model, "merges", "model.merges", json::value_t::array);
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string path = "model.merges[" + std::to_string(rank) + "]";
    const auto [left, right] = merge_parts(merges[rank], path, reader);
    merged = left + right;
    const auto l = ids.find(left);
    const auto r = ids.find(right);
    const auto m = ids.find(merged);
    if (l == ids.end() || r == ids.end() || m == ids.end()) {
      reader.fail(path, "names a token not in model.vocab: \"" +
                            (l == ids.end() ? left : r == ids.end() ? right : merged) + "\"");
    }
    bpe.add_merge(l->second, r->second, static_cast<int32_t>(rank), m->second);
  }

  for (const auto& [token, id] : ids) {
    tokens.set(id, token_string_bytes(token), Tokenizer::TokenKind::kVocabulary);
  }
  return ids;
}

// Reads added_tokens; their ids take precedence over the model's for decoding, as in HF.
void load_added_tokens(const json& root, const FieldReader& reader,
                       const std::unordered_map<std::string, int32_t>& ids,
                       AddedTokenMatcher& matcher,
                       std::unordered_map<std::string, int32_t>& added_ids, TokenTable& tokens) {
  const json* added = reader.optional(root, "added_tokens", "added_tokens", json::value_t::array);
  if (added == nullptr) return;
  for (size_t i = 0; i < added->size(); ++i) {
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    const json& token = (*added)[i];
    if (!token.is_object()) reader.fail(path, "must be an object");
    const int64_t id =
        reader.required(token, "id", path + ".id", json::value_t::number_integer).get<int64_t>();
    if (id < 0 || id >= INT32_MAX) reader.fail(path + ".id", "must be a non-negative 32-bit id");
    const std::string content = reader.string(token, "content", path + ".content");
    if (content.empty()) reader.fail(path + ".content", "is empty");
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (reader.flag(token, key, path + "." + key)) {
        reader.fail(path + "." + key, "= true is not supported (token \"" + content + "\")");
      }
    }
    if (const auto it = ids.find(content); it != ids.end() && it->second != id) {
      reader.fail(path + ".id", "= " + std::to_string(id) + " but model.vocab gives \"" +
                                    content + "\" the id " + std::to_string(it->second));
    }
    const bool normalized = reader.flag(token, "normalized", path + ".normalized");
    if (!matcher.add(content, static_cast<int32_t>(id), normalized)) {
      reader.fail(path + ".content", "\"" + content + "\" appears twice in added_tokens");
    }
    added_ids.emplace(content, static_cast<int32_t>(id));
    tokens.set(static_cast<int32_t>(id), token_string_bytes(content), Tokenizer::TokenKind::kAdded);
  }
}

void check_decoder(const json& root, const FieldReader& reader) {
  const json& decoder = reader.required(root, "decoder", "decoder", json::value_t::object);
  const std::string type = reader.string(decoder, "type", "decoder.type");
  if (type != "ByteLevel") {
    reader.fail("decoder.type", "'" + type + "' is not supported (only ByteLevel is)");
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open tokenizer file");
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw IoError(file.string() + ": cannot read tokenizer file");
  json root;
  try {
    root = json::parse(text.str());
  } catch (const json::exception& e) {
    throw FormatError(file.string() + ": not valid JSON: " + e.what());
  }
  const FieldReader reader(file.string());
  if (!root.is_object()) throw FormatError(file.string() + ": not a JSON object");
  auto impl = std::make_unique<Impl>();
  load_normalizer(root, reader);
  load_pre_tokenizer(root, reader, impl->pre_tokenizer);
  const auto vocab = load_model(root, reader, impl->model, impl->tokens);
  load_added_tokens(root, reader, vocab, impl->added, impl->added_ids, impl->tokens);
  check_decoder(root, reader);
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::string repaired;
  if (utf8::first_invalid_offset(text) != text.size()) {
    utf8::append_repaired(text, repaired);
    text = repaired;
  }
  std::vector<TextSegment> segments;
  impl_->added.split(text, segments);
  const auto match = impl_->pre_tokenizer.make_match_data();
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 1);
  for (const TextSegment& segment : segments) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
      continue;
    }
    impl_->pre_tokenizer.split(segment.text, match.get(), [&](std::string_view piece) {
      impl_->encode_piece(piece, ids);
    });
  }
  return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  return impl_->tokens.bytes(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (const int32_t id : ids) bytes += token_bytes(id);
  if (utf8::first_invalid_offset(bytes) == bytes.size()) return bytes;
  std::string text;
  utf8::append_repaired(bytes, text);
  return text;
}

Tokenizer::TokenKind Tokenizer::token_kind(int32_t id) const { return impl_->tokens.kind(id); }

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  const auto it = impl_->added_ids.find(std::string(content));
  if (it == impl_->added_ids.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

std::string StreamDecoder::next(int32_t id) {
  pending_ += tokenizer_->token_bytes(id);
  std::string text;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::Unit unit = utf8::next_unit(pending_, pos);
    if (unit.kind == utf8::Unit::kTruncated) break;
    if (unit.kind == utf8::Unit::kValid) {
      text.append(pending_, pos, unit.size);
    } else {
      text += utf8::kReplacement;
    }
    pos += unit.size;
  }
  pending_.erase(0, pos);
  return text;
}

std::string StreamDecoder::flush() {
  std::string text;
  utf8::append_repaired(pending_, text);
  pending_.clear();
  return text;
}

}  // namespace dsv4
