// Tokenizer: BPE merge order, byte-level mapping, added-token matching, the pre-tokenizer's
// splits, streaming decode over split characters, invalid UTF-8, and load errors, on a tiny
// hand-made tokenizer.json (its expected ids were checked with Hugging Face tokenizers); then
// the real DeepSeek-V4 tokenizer.json when scripts/setup.sh has fetched it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// GPT-2's byte-level character of each byte, written out independently of the library.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int code = b;
  if (!printable) {
    code = 256;
    for (int c = 0; c < b; ++c) {
      code += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    }
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

json added_token(int id, const std::string& content, bool normalized, bool special) {
  return {{"id", id},           {"content", content}, {"single_word", false},
          {"lstrip", false},    {"rstrip", false},    {"normalized", normalized},
          {"special", special}};
}

// Ids 0-255: the byte-level token of that byte. 256-264: merged tokens. 265-269: added tokens.
json tiny_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::vector<std::string> merged = {"he", "ll", "hell", "hello", "bc",
                                           "ab", "aa", "Ġw",   "aĠ"};
  for (size_t i = 0; i < merged.size(); ++i) vocab[merged[i]] = 256 + static_cast<int>(i);
  return {
      {"version", "1.0"},
      {"added_tokens",
       {added_token(265, "<tag>", false, true), added_token(266, "<tagged>", false, true),
        added_token(267, "xy", false, false), added_token(268, "wxy", true, false),
        added_token(269, "<|n|>", true, false)}},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\s+"}}},
           {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
        {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
        {"merges", {"b c", "a b", "a a", "h e", "l l", "he ll", "hell o", "a Ġ", "Ġ w"}}}}};
}

// A file of this test process's own (ctest runs each test as a process, several at once, and a
// shared name let one process read another's half-written file), removed when it goes out of
// scope (each test process left a file of each name behind).
struct TempFile {
  std::filesystem::path path;
  TempFile(const std::string& name, const std::string& text)
      : path(std::filesystem::path(testing::TempDir()) / (std::to_string(getpid()) + "_" + name)) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

Tokenizer load_json(const json& j, const std::string& name = "tiny_tokenizer.json") {
  return Tokenizer::load(TempFile(name, j.dump()).path);
}

const Tokenizer& tiny() {
  static const Tokenizer tokenizer = load_json(tiny_json());
  return tokenizer;
}

TEST(TokenizerBpe, LowerRankMergesFirstWhereverItIs) {
  EXPECT_EQ(tiny().encode("abc"), (Ids{'a', 260}));  // "b c" (rank 0) beats "a b" (rank 1)
  EXPECT_EQ(tiny().encode("hello"), (Ids{259}));    // he, ll, hell, hello
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  EXPECT_EQ(tiny().encode("aaa"), (Ids{262, 'a'}));
  EXPECT_EQ(tiny().encode("aaaa"), (Ids{262, 262}));
}

TEST(TokenizerBpe, LongPieceMergesInOrder) {
  std::string text;
  Ids expected;
  for (int i = 0; i < 20000; ++i) {
    text += "aa";
    expected.push_back(262);
  }
  EXPECT_EQ(tiny().encode(text), expected);
}

TEST(TokenizerByteLevel, BytesMapToTheirTokens) {
  EXPECT_EQ(tiny().encode("\xC3\xA9"), (Ids{0xC3, 0xA9}));  // é
  EXPECT_EQ(tiny().encode("\n \xC3\xBF"), (Ids{10, 32, 0xC3, 0xBF}));
  EXPECT_EQ(tiny().encode(std::string("\0", 1)), (Ids{0}));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tiny().token_bytes(b), std::string(1, char(b))) << b;
  EXPECT_EQ(tiny().token_bytes(263), " w");
  EXPECT_EQ(tiny().decode(Ids{0xC3, 0xA9, 263}), "\xC3\xA9 w");
}

TEST(TokenizerPreTokenizer, MergesStayInsideTheirPiece) {
  // "a Ġ" outranks "Ġ w", but the regex has cut "a w" into "a" and " w".
  EXPECT_EQ(tiny().encode("a w"), (Ids{'a', 263}));
  EXPECT_EQ(tiny().encode("hello world"), (Ids{259, 263, 'o', 'r', 'l', 'd'}));
}

TEST(TokenizerPreTokenizer, StringPatternIsLiteral) {
  // A String pattern "." isolates dots only; as a regex it would isolate every character.
  EXPECT_EQ(tiny().encode("ab.bc"), (Ids{261, '.', 260}));
}

TEST(TokenizerAddedTokens, LongestMatchAtTheLeftmostPosition) {
  EXPECT_EQ(tiny().encode("<tagged><tag>"), (Ids{266, 265}));
  EXPECT_EQ(tiny().encode("x<|n|>y"), (Ids{'x', 269, 'y'}));
  EXPECT_EQ(tiny().encode("<tag"), (Ids{'<', 't', 'a', 'g'}));
}

TEST(TokenizerAddedTokens, UnnormalizedTokensAreCutFirst) {
  // "xy" (normalized=false) is found before "wxy" (normalized=true) gets a chance.
  EXPECT_EQ(tiny().encode("wxyz"), (Ids{'w', 267, 'z'}));
}

TEST(TokenizerAddedTokens, LookupAndDecode) {
  EXPECT_EQ(tiny().token_id("<tag>"), 265);
  EXPECT_EQ(tiny().token_id("<|n|>"), 269);
  EXPECT_EQ(tiny().token_id("<tag"), std::nullopt);
  EXPECT_EQ(tiny().token_id("ab"), std::nullopt);  // a model token, not an added one
  EXPECT_EQ(tiny().vocab_size(), 270);
  EXPECT_EQ(tiny().decode(Ids{265, 'h', 269}), "<tag>h<|n|>");
}

TEST(TokenizerAddedTokens, TokenKindsTellVocabularyAddedAndMissingIds) {
  using Kind = Tokenizer::TokenKind;
  EXPECT_EQ(tiny().token_kind('a'), Kind::kVocabulary);
  EXPECT_EQ(tiny().token_kind(264), Kind::kVocabulary);  // "aĠ", a merge
  EXPECT_EQ(tiny().token_kind(265), Kind::kAdded);       // "<tag>", special
  EXPECT_EQ(tiny().token_kind(267), Kind::kAdded);       // "xy", not special
  EXPECT_EQ(tiny().token_kind(270), Kind::kNone);
  EXPECT_EQ(tiny().token_kind(-1), Kind::kNone);
  json gap = tiny_json();
  gap["added_tokens"].push_back(added_token(300, "<far>", false, true));
  const Tokenizer far = load_json(gap, "gap_tokenizer.json");
  EXPECT_EQ(far.vocab_size(), 301);
  EXPECT_EQ(far.token_kind(299), Kind::kNone);  // ids between the tokens name none
  EXPECT_EQ(far.token_kind(300), Kind::kAdded);
}

TEST(TokenizerDecode, UnknownIdsAreRejected) {
  EXPECT_THROW(tiny().decode(Ids{'a', 270}), UsageError);
  EXPECT_THROW(tiny().decode(Ids{-1}), UsageError);
  StreamDecoder stream(tiny());
  EXPECT_THROW(stream.next(1000), UsageError);
}

TEST(TokenizerDecode, IncompleteBytesBecomeReplacementCharacters) {
  EXPECT_EQ(tiny().decode(Ids{0xF0, 0x9F, 0x98, 0x80}), "\xF0\x9F\x98\x80");
  EXPECT_EQ(tiny().decode(Ids{0xF0, 'A'}), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(tiny().decode(Ids{0xF0, 0x9F}), "\xEF\xBF\xBD");  // one U+FFFD per maximal subpart
  EXPECT_EQ(tiny().decode(Ids{0x80, 0x80}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerStreamDecoder, HoldsASplitEmojiUntilItsLastByte) {
  StreamDecoder stream(tiny());
  EXPECT_EQ(stream.next('a'), "a");
  EXPECT_EQ(stream.next(0xF0), "");
  EXPECT_EQ(stream.next(0x9F), "");
  EXPECT_EQ(stream.next(0x98), "");
  EXPECT_EQ(stream.next(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.next(259), "hello");
  EXPECT_EQ(stream.flush(), "");
}

TEST(TokenizerStreamDecoder, BrokenAndUnfinishedCharacters) {
  StreamDecoder stream(tiny());
  EXPECT_EQ(stream.next(0xE2), "");
  EXPECT_EQ(stream.next('b'), "\xEF\xBF\xBD" "b");  // the E2 was never continued
  EXPECT_EQ(stream.next(0xE2), "");
  EXPECT_EQ(stream.next(0x82), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // E2 82 needs one more byte
  EXPECT_EQ(stream.flush(), "");
}

TEST(TokenizerStreamDecoder, ConcatenationEqualsDecode) {
  // Random byte tokens (mostly the starts and ends of multi-byte characters) and merged tokens.
  std::mt19937 rng(7);
  const std::vector<int32_t> pool = {0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 0xC3, 0xA9,
                                     0xED, 0xA0, 0xF4, 0x90, 'a',  259,  263,  265,  0xFF};
  for (int round = 0; round < 200; ++round) {
    Ids ids(rng() % 24);
    for (auto& id : ids) id = pool[rng() % pool.size()];
    StreamDecoder stream(tiny());
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = stream.next(id);
      EXPECT_EQ(utf8::first_invalid_offset(piece), piece.size());
      streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, tiny().decode(ids)) << "round " << round;
  }
}

TEST(TokenizerEncode, ConcurrentEncodesShareTheCacheSafely) {
  // A fresh tokenizer, so the threads fill its word cache while reading it.
  const Tokenizer tokenizer = load_json(tiny_json(), "tiny_threads.json");
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) {
    texts.push_back("hello " + std::string(i % 7 + 1, 'a') + " w" + std::to_string(i) + " abc");
  }
  std::vector<Ids> expected;
  for (const auto& text : texts) expected.push_back(tiny().encode(text));
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < wrong.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 7 + t * 31 + round) % texts.size();
          wrong[t] += tokenizer.encode(texts[k]) != expected[k];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST(TokenizerInvalidUtf8, ReplacedByReplacementCharacterBeforeEncoding) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tiny().encode("a\xFF" "b"), tiny().encode("a" + fffd + "b"));
  EXPECT_EQ(tiny().encode("\xE2\x82"), tiny().encode(fffd));  // truncated: one U+FFFD
  EXPECT_EQ(tiny().encode("\xED\xA0\x80"), tiny().encode(fffd + fffd + fffd));  // surrogate
  EXPECT_EQ(tiny().encode("\xC0\xAF"), tiny().encode(fffd + fffd));             // overlong
  EXPECT_EQ(tiny().decode(tiny().encode("x\xF4\x90\x80\x80y")),  // above U+10FFFF
            "x" + fffd + fffd + fffd + fffd + "y");
  EXPECT_EQ(tiny().decode(tiny().encode("<tag>\xFF")), "<tag>" + fffd);
}

TEST(TokenizerInvalidUtf8, FirstInvalidOffset) {
  EXPECT_EQ(utf8::first_invalid_offset("plain ascii text, longer than eight"), 35u);
  EXPECT_EQ(utf8::first_invalid_offset("0123456789\xC3\xA9\xFF"), 12u);
  EXPECT_EQ(utf8::first_invalid_offset("\xF0\x9F\x98"), 0u);
}

// Load errors: each names the file, and the field where there is one.
void expect_load_error(const json& j, const std::string& field, const std::string& name) {
  const TempFile file(name, j.dump());
  const std::filesystem::path& path = file.path;
  try {
    Tokenizer::load(path);
    ADD_FAILURE() << "no error for " << field;
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(field), std::string::npos) << message;
  }
}

TEST(TokenizerLoad, MissingFileNamesTheFile) {
  const auto path = std::filesystem::path(testing::TempDir()) / "no_such_tokenizer.json";
  try {
    Tokenizer::load(path);
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, BadJsonNamesTheFile) {
  const TempFile file("bad.json", "{\"model\": [1, 2");
  const std::filesystem::path& path = file.path;
  try {
    Tokenizer::load(path);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, MalformedOrUnsupportedFieldsAreNamed) {
  json j = tiny_json();
  j["model"].erase("merges");
  expect_load_error(j, "model.merges", "no_merges.json");

  j = tiny_json();
  j["model"]["type"] = "WordPiece";
  expect_load_error(j, "model.type", "wordpiece.json");

  j = tiny_json();
  j["model"]["merges"][2] = "a zz";
  expect_load_error(j, "model.merges[2]", "unknown_merge.json");

  j = tiny_json();
  j["model"]["vocab"].erase("Ġ");
  expect_load_error(j, "model.vocab", "no_space_byte.json");

  j = tiny_json();
  j["added_tokens"][1]["lstrip"] = true;
  expect_load_error(j, "added_tokens[1].lstrip", "lstrip.json");

  j = tiny_json();
  j["normalizer"] = {{"type", "NFC"}};
  expect_load_error(j, "normalizer", "nfc.json");

  j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][1]["behavior"] = "Removed";
  expect_load_error(j, "pre_tokenizer.pretokenizers[1].behavior", "removed.json");

  j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][1]["pattern"]["Regex"] = "(unclosed";
  expect_load_error(j, "pre_tokenizer.pretokenizers[1].pattern", "bad_regex.json");

  j = tiny_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_load_error(j, "decoder.type", "decoder.json");

  j = tiny_json();
  j["added_tokens"][0]["content"] = "ab";  // model.vocab has "ab" as 261, not 265
  expect_load_error(j, "added_tokens[0].id", "clash.json");

  j = tiny_json();
  j["added_tokens"][1]["content"] = "<tag>";
  expect_load_error(j, "added_tokens[1].content", "twice.json");
}

// The real DeepSeek-V4 tokenizer.json, when present.
const Tokenizer* real() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    const std::filesystem::path path = DSV4_TOKENIZER_JSON;
    return std::filesystem::exists(path) ? std::make_unique<Tokenizer>(Tokenizer::load(path))
                                         : nullptr;
  }();
  return tokenizer.get();
}

#define REQUIRE_REAL_TOKENIZER()                                                        \
  if (real() == nullptr) {                                                              \
    GTEST_SKIP() << DSV4_TOKENIZER_JSON << " is absent; scripts/setup.sh fetches it"; \
  }

TEST(RealTokenizer, V4SpecialTokenIds) {
  REQUIRE_REAL_TOKENIZER();
  EXPECT_EQ(real()->token_id("<think>"), 128821);
  EXPECT_EQ(real()->token_id("</think>"), 128822);
  EXPECT_EQ(real()->token_id("｜DSML｜"), 128825);
  EXPECT_EQ(real()->token_id("<｜latest_reminder｜>"), 128828);
  EXPECT_EQ(real()->token_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(real()->token_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(real()->vocab_size(), 129280);
}

TEST(RealTokenizer, EncodingsMatchHuggingFace) {
  REQUIRE_REAL_TOKENIZER();
  // Each expected list is Hugging Face tokenizers' encode(s, add_special_tokens=False).ids.
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"Hello, world!", {19923, 14, 2058, 3}},
      {"The quick brown fox jumps over the lazy dog.\n\n",
       {671, 4787, 13769, 46012, 54994, 1060, 270, 41638, 6397, 339}},
      {"def f(x):\n    return x**2  # 12345",
       {3465, 285, 4042, 3395, 361, 1354, 1527, 666, 20, 223, 1823, 223, 6895, 1883}},
      {"你好，世界！こんにちは", {30594, 303, 3427, 1175, 4549, 7245, 2298, 12457, 2841}},
      {"I ❤️ 🦀 and 👨‍👩‍👧",
       {43, 53341, 100, 10759, 7351, 102, 225, 305, 52780, 104, 46088, 25730, 105, 46088, 25730,
        103}},
      {"<｜User｜>Hi<｜Assistant｜><think>ok</think>Done<｜end▁of▁sentence｜>",
       {128803, 23166, 128804, 128821, 633, 128822, 68520, 1}},
      {"price: $1,234.56 on 2026-11-29",
       {18785, 28, 957, 19, 14, 14456, 16, 3661, 377, 223, 939, 24, 15, 779, 15, 1557}},
      {"a\t\tb   \n  c", {67, 200, 37496, 14320, 223, 274}},
      {"｜DSML｜<｜latest_reminder｜>", {128825, 128828}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(real()->encode(text), ids) << text;
    EXPECT_EQ(real()->decode(ids), text);
  }
}

TEST(RealTokenizer, LongRunsRoundTrip) {
  REQUIRE_REAL_TOKENIZER();
  for (const std::string& text :
       {std::string(200000, ' ') + "x", std::string(200000, 'q'), std::string(100000, '\n'),
        std::string(50000, '7')}) {
    EXPECT_EQ(real()->decode(real()->encode(text)), text) << text.size();
  }
}

TEST(RealTokenizer, StreamingAnEmojiSentenceEqualsDecode) {
  REQUIRE_REAL_TOKENIZER();
  const std::string text = "I ❤️ 🦀 and 👨‍👩‍👧, 你好 <think>🙂</think>";
  const Ids ids = real()->encode(text);
  StreamDecoder stream(*real());
  std::string streamed;
  int held = 0;  // tokens after which nothing could be emitted: a character was split
  for (const int32_t id : ids) {
    const std::string piece = stream.next(id);
    held += piece.empty();
    streamed += piece;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_GT(held, 0);
}

}  // namespace
}  // namespace dsv4
