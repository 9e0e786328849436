// Tokenizer: the byte-level BPE tokenizer of a Hugging Face tokenizer.json (DeepSeek-V4's), with
// encode, decode and a streaming decoder. Encoding follows Hugging Face tokenizers'
// encode(text, add_special_tokens=False) id for id:
//   1. added tokens (special or not) are cut out of the raw text, leftmost-longest;
//   2. the text between them is split by the pre-tokenizer's Split regexes (PCRE2);
//   3. each piece's bytes are merged by the BPE model (byte-level: one symbol per byte).
// Supported tokenizer.json features (anything else is refused at load with a FormatError naming
// the file and field): normalizer null or an empty Sequence; pre_tokenizer a Split (regex or
// string pattern, behavior Isolated, invert false), a ByteLevel (add_prefix_space false,
// use_regex false) or a Sequence of Splits ending in that ByteLevel; model BPE without dropout,
// ignore_merges, or subword prefix/suffix; decoder ByteLevel; added tokens without lstrip, rstrip
// or single_word. The post_processor adds nothing when no special tokens are requested and is
// not read.
//
// Invalid UTF-8: encode() first replaces each maximal invalid byte subsequence of its input with
// U+FFFD (as Python's bytes.decode(errors="replace") does), so encode never fails and
// decode(encode(b)) is that repaired text; for valid UTF-8, decode(encode(s)) == s. decode()
// output is always valid UTF-8: byte sequences the ids do not complete become U+FFFD, as Hugging
// Face's decoder does (String::from_utf8_lossy).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

class Tokenizer {
 public:
  // Reads and checks a tokenizer.json. Throws IoError if the file cannot be read, FormatError
  // (naming the file and the field) if it is malformed or uses an unsupported feature.
  static Tokenizer load(const std::filesystem::path& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text` (any bytes; see the note on invalid UTF-8 above), no special tokens added.
  // Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;

  // The text of `ids`, always valid UTF-8. Throws UsageError for an id that names no token.
  std::string decode(std::span<const int32_t> ids) const;

  // The raw bytes token `id` stands for (possibly part of a UTF-8 character). Throws
  // UsageError for an id that names no token.
  std::string_view token_bytes(int32_t id) const;

  // What an id names: no token, a token of the BPE vocabulary, or an added token (special or
  // not: "<｜end▁of▁sentence｜>", "<think>", ...), whose bytes are its content.
  enum class TokenKind { kNone, kVocabulary, kAdded };
  TokenKind token_kind(int32_t id) const;

  // The id of the added (special or not) token whose content is exactly `content`.
  std::optional<int32_t> token_id(std::string_view content) const;

  // One more than the largest token id: the size of a table indexed by id.
  int32_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decoding for streaming: feed ids one at a time and get back only complete UTF-8
// characters; a character split across tokens is held until its last byte arrives. The
// concatenation of every next() and the final flush() equals Tokenizer::decode of all the ids.
// The tokenizer must outlive the decoder and not be moved from.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // The text that `id` completes (possibly empty). Throws UsageError for an unknown id.
  std::string next(int32_t id);

  // The end of the stream: held bytes that never formed a character come out as U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // the start of an unfinished character, at most 3 bytes
};

}  // namespace dsv4
