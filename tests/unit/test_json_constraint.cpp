// The JSON constraint of response_format json_object: the byte-level prefix checker
// (sampling/json_prefix.h) on valid and invalid prefixes, numbers, escapes, surrogates, nesting
// and completion, checked against nlohmann::json on random documents and mutations of them; and
// the token mask (sampling/json_token_mask.h) on a small made-up vocabulary.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/json_prefix.h"
#include "sampling/json_token_mask.h"
#include "token_mask_test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// The state after `text`, which must be accepted whole.
JsonObjectPrefix after(std::string_view text) {
  JsonObjectPrefix prefix;
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_TRUE(prefix.advance(text[i])) << "byte " << i << " of " << text;
  }
  return prefix;
}

// Whether `text` is accepted whole and closes the object at its last byte.
bool whole_object(std::string_view text) {
  JsonObjectPrefix prefix;
  return prefix.advance(text) && prefix.complete();
}

TEST(JsonObjectPrefix, EveryPrefixOfAnObjectIsAcceptedAndOnlyTheLastByteClosesIt) {
  const std::vector<std::string> documents = {
      "{}",
      " \t\r\n{ }",
      R"({"a": 1})",
      R"({"a":[1,-0.5e+3,0,1.25E-2,true,false,null,{"b":"x\"\\\/\b\f\n\r\t\u00e9\uABCD"}],"c":{}})",
      "{\"k\" : [ [], [[]], {} ] , \"\": \"\"}",
      "{\"\xC3\xA9\": \"\xE6\x97\xA5\xE6\x9C\xAC \x7F\"}",  // UTF-8 and DEL inside strings
      R"({"pair": "\uD83D\ude00", "d7ff": "\uD7FF", "e000": "\uE000"})",
  };
  for (const std::string& doc : documents) {
    JsonObjectPrefix prefix;
    for (size_t i = 0; i < doc.size(); ++i) {
      ASSERT_FALSE(prefix.complete()) << doc << " closed before byte " << i;
      ASSERT_TRUE(prefix.advance(doc[i])) << doc << " refused at byte " << i;
    }
    EXPECT_TRUE(prefix.complete()) << doc;
    EXPECT_TRUE(json::parse(doc).is_object()) << doc;  // the list itself is valid JSON
    for (char next : {' ', '\n', '}', ',', '{', 'x'}) EXPECT_FALSE(prefix.advance(next)) << doc << " + " << next;
  }
}

TEST(JsonObjectPrefix, InvalidBytesAreRefusedAndLeaveTheStateAsItWas) {
  struct Case {
    std::string prefix;
    char byte;
  };
  const std::vector<Case> cases = {
      {"", '['}, {"", '"'}, {"", '1'}, {"", 'x'}, {"", '}'},  // the top level is an object
      {"{", '1'}, {"{", ']'}, {"{", ','}, {"{", '\''},       // a key or '}'
      {R"({"a")", '}'}, {R"({"a")", '1'}, {R"({"a":)", '}'}, {R"({"a":)", ','},
      {R"({"a":1,)", '}'}, {R"({"a":[1,)", ']'}, {R"({"a":[)", ','},  // no trailing or empty slots
      {R"({"a":[1)", '}'}, {R"({"a":{)", ']'}, {R"({"a":{"b":1)", ']'},  // brackets must match
      {R"({"a":)", 'x'}, {R"({"a":tr)", 'x'}, {R"({"a":nul)", 'L'}, {R"({"a":true)", 'e'},
      {R"({"a":")", '\n'}, {R"({"a":")", '\x1f'}, {R"({"a":")", '\0'},  // controls in strings
      {R"({"a":"\)", 'x'}, {R"({"a":"\)", 'U'}, {R"({"a":"\u12)", 'g'},
      {R"({"a":"\ud)", 'c'}, {R"({"a":"\uD)", 'F'},  // a low surrogate alone
      {R"({"a":"\uD800)", '"'}, {R"({"a":"\uD800\)", 'n'}, {R"({"a":"\uDBFF\u)", '0'},
      {R"({"a":"\uD800\uD)", '8'},  // a high surrogate needs a low one
      {"{", '\x80'}, {"{", '\xEF'},  // bytes >= 0x80 only inside strings
      {"{}", ' '}, {"{}", '{'},      // nothing after the object
  };
  for (const Case& c : cases) {
    JsonObjectPrefix prefix = after(c.prefix);
    const JsonObjectPrefix before = prefix;
    EXPECT_FALSE(prefix.advance(c.byte)) << c.prefix << " + '" << c.byte << "'";
    EXPECT_EQ(prefix, before) << c.prefix << " + '" << c.byte << "'";
  }
}

TEST(JsonObjectPrefix, NumbersFollowJsonsGrammar) {
  for (const char* number : {"0", "-0", "-0.5e+3", "12", "1.0", "1e5", "1E-5", "0e0", "-12.34E+56", "10", "9.000"}) {
    EXPECT_TRUE(whole_object(std::string(R"({"n":)") + number + "}")) << number;
    EXPECT_TRUE(whole_object(std::string(R"({"n":[)") + number + " ]}")) << number;
  }
  for (const char* number : {"01", "-", "1.", ".5", "+1", "1e", "1e+", "--1", "0x1", "1.e5", "-.5", "00", "1.2.3", "1e5.0"}) {
    EXPECT_FALSE(whole_object(std::string(R"({"n":)") + number + "}")) << number;
  }
}

TEST(JsonObjectPrefix, NestingStopsAtTheDepthLimit) {
  const int arrays = JsonObjectPrefix::kMaxDepth - 1;  // the top-level object is one level
  const std::string deepest = R"({"a":)" + std::string(static_cast<size_t>(arrays), '[');
  JsonObjectPrefix prefix = after(deepest);
  EXPECT_FALSE(prefix.advance('['));
  EXPECT_FALSE(prefix.advance('{'));
  EXPECT_TRUE(prefix.advance(std::string(static_cast<size_t>(arrays), ']') + "}"));
  EXPECT_TRUE(prefix.complete());
  // Arrays and objects alternate on the stack and each closes with its own bracket.
  EXPECT_TRUE(whole_object(R"({"a":[{"b":[{"c":[]}]}],"d":[[{}]]})"));
  EXPECT_FALSE(whole_object(R"({"a":[{"b":[{"c":[]]}]}]})"));
}

TEST(JsonObjectPrefix, WhitespaceRunsOutsideStringsAreBounded) {
  const std::string run(JsonObjectPrefix::kMaxWhitespaceRun, ' ');
  const std::pair<std::string, char> gaps[] = {{"", '{'},           {"{", '}'},     {R"({"a")", ':'},     {R"({"a":)", '1'},
                                                {R"({"a":1)", ','},   {R"({"a":[)", ']'}, {R"({"a":true)", '}'}};
  for (const auto& [prefix, next] : gaps) {
    JsonObjectPrefix state = after(prefix + run);
    EXPECT_FALSE(state.advance('\n')) << prefix;
    EXPECT_TRUE(state.advance(next)) << prefix;  // the gap can still end
  }
  // Any other byte starts a new run; inside strings whitespace is content, not counted.
  EXPECT_TRUE(whole_object(run + "{" + run + R"("a")" + run + ":" + run + "[" + run + "1" + run + "]" + run + "}"));
  EXPECT_TRUE(whole_object(R"({"a":")" + run + run + run + R"("})"));
}

// A random JSON value whose containers nest at most `depth` deep.
json random_value(std::mt19937& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 0 ? 8 : 6));
  switch (kind) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng()) - (1ll << 31);
    case 3: return std::ldexp(static_cast<double>(rng()) - 2e9, static_cast<int>(rng() % 80) - 40);
    case 4:
    case 5: {
      static const std::vector<std::string> pieces = {"a", "b", " ", "\"", "\\", "/", "\b", "\f", "\n", "\r",
                                                      "\t", "\x01", "\x1f", "\x7f", "\xC3\xA9", "\xF0\x9F\x98\x80"};
      std::string s;
      for (size_t n = rng() % 6; n > 0; --n) s += pieces[rng() % pieces.size()];
      return s;
    }
    case 6: {
      json array = json::array();
      for (size_t n = rng() % 4; n > 0; --n) array.push_back(random_value(rng, depth - 1));
      return array;
    }
    default: {
      json object = json::object();
      for (size_t n = rng() % 4; n > 0; --n) object[std::string(1, static_cast<char>('a' + rng() % 26))] = random_value(rng, depth - 1);
      return object;
    }
  }
}

// `text` with its exponent digits (those after a digit and 'e' or 'E') made '0'. nlohmann refuses
// numbers beyond a double's range, which JSON's grammar allows; a digit for a digit changes its
// verdict nowhere else.
std::string zero_exponents(std::string text) {
  for (size_t i = 1; i < text.size(); ++i) {
    if ((text[i] != 'e' && text[i] != 'E') || !std::isdigit(static_cast<unsigned char>(text[i - 1]))) continue;
    size_t j = i + 1;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
    for (; j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])); ++j) text[j] = '0';
  }
  return text;
}

// nlohmann::json's verdict on `text` as one object, nothing after it.
bool nlohmann_says_object(const std::string& text) {
  if (text.empty() || text.back() != '}') return false;
  const json parsed = json::parse(zero_exponents(text), nullptr, false);
  return !parsed.is_discarded() && parsed.is_object();
}

TEST(JsonObjectPrefix, AgreesWithNlohmannOnRandomDocumentsAndTheirMutations) {
  std::mt19937 rng(20240601);
  const std::string mutation_bytes = "{}[]:,\"\\ \n\t0123456789-+.eEtrufalsnbu\x01";  // ASCII only
  int accepted_mutants = 0;
  for (int round = 0; round < 3000; ++round) {
    json object = json::object();
    for (size_t n = rng() % 4; n > 0; --n) object[std::string(1, static_cast<char>('a' + rng() % 26))] = random_value(rng, 4);
    // ASCII only (\u escapes, surrogate pairs for the emoji), so that a mutation cannot break a
    // UTF-8 sequence, which nlohmann refuses and the checker, by design, does not look at.
    const std::string doc = object.dump(rng() % 2 == 0 ? -1 : static_cast<int>(rng() % 3), ' ', true);
    ASSERT_TRUE(whole_object(doc)) << doc;
    std::string mutant = doc;
    for (size_t n = 1 + rng() % 3; n > 0 && !mutant.empty(); --n) {
      const size_t at = rng() % mutant.size();
      const char byte = mutation_bytes[rng() % mutation_bytes.size()];
      switch (rng() % 3) {
        case 0: mutant[at] = byte; break;
        case 1: mutant.insert(mutant.begin() + static_cast<std::ptrdiff_t>(at), byte); break;
        default: mutant.erase(at, 1 + rng() % 2); break;
      }
    }
    const bool expected = nlohmann_says_object(mutant);
    ASSERT_EQ(whole_object(mutant), expected) << mutant;
    accepted_mutants += expected;
    // Every prefix the checker accepts, nlohmann accepts as the start of a document: it ends in
    // "unexpected end of input" rather than an error inside.
    JsonObjectPrefix prefix;
    size_t accepted = 0;
    while (accepted < mutant.size() && prefix.advance(mutant[accepted])) ++accepted;
    if (!prefix.complete()) {
      try {
        const json whole = json::parse(zero_exponents(mutant.substr(0, accepted)));
        ADD_FAILURE() << "nlohmann parsed the unfinished " << whole.dump();
      } catch (const json::parse_error& e) {
        EXPECT_EQ(e.byte, accepted + 1) << mutant.substr(0, accepted) << ": " << e.what();
      }
    }
  }
  EXPECT_GT(accepted_mutants, 100);  // the mutations also make valid objects, not only broken ones
}

// What the engine test relies on to check a cut-off answer: nlohmann fails such a prefix at its
// end, one past its last byte, whatever was left unfinished.
TEST(JsonObjectPrefix, NlohmannRunsOutOfInputOnEveryUnfinishedPrefix) {
  for (const std::string prefix : {"", " ", "{", R"({"a)", R"({"a" )", R"({"a":)", R"({"a":tr)", R"({"a":-)", R"({"a":0)",
                                   R"({"a":1.)", R"({"a":1e+)", R"({"a":1e5)", R"({"a":"\)", R"({"a":"\u00)",
                                   R"({"a":"\uD83D)", R"({"a":"\uD83D\u)", R"({"a":[1,)", R"({"a":{)", R"({"a":1 )"}) {
    EXPECT_FALSE(after(prefix).complete()) << prefix;
    try {
      const json whole = json::parse(prefix);
      ADD_FAILURE() << "nlohmann parsed the unfinished " << whole.dump();
    } catch (const json::parse_error& e) {
      EXPECT_EQ(e.byte, prefix.size() + 1) << prefix << ": " << e.what();
    }
  }
}

TEST(JsonObjectPrefix, EscapesNlohmannDoesNotWriteAreCheckedToo) {
  for (const char* text : {R"({"s":"\/\u0041\u00e9\uD834\uDD1E\uffff"})", R"({"s":"\uDBFF\uDFFF"})"}) {
    EXPECT_TRUE(whole_object(text)) << text;
    EXPECT_TRUE(nlohmann_says_object(text)) << text;
  }
  for (const char* text : {R"({"s":"\uD834"})", R"({"s":"\uDD1E"})", R"({"s":"\uD834\u0041"})", R"({"s":"\a"})"}) {
    EXPECT_FALSE(whole_object(text)) << text;
    EXPECT_FALSE(nlohmann_says_object(text)) << text;
  }
}

// A vocabulary of made-up tokens; index = id. Empty ones stand for special tokens.
const std::vector<std::string> kVocabulary = {
    "",       // 0: a special token (say, end of sequence)
    "{",      // 1
    "}",      // 2
    "{\"",    // 3
    "\"",     // 4
    "key",    // 5
    "\":",    // 6
    " ",      // 7
    "1",      // 8
    "23",     // 9
    ",",      // 10
    "\"}",    // 11
    "[",      // 12
    "]}",     // 13
    "\n\n",   // 14
    "a\"b",   // 15
    "\\u00",  // 16
    "e9",     // 17
    "\x01",   // 18
    "\xC3\xA9",  // 19
    ":",      // 20
};

std::vector<int32_t> allowed_ids(const JsonTokenMask& mask, std::string_view text) {
  std::vector<uint8_t> allowed;
  const size_t count = mask.allowed_tokens(after(text), allowed);
  EXPECT_EQ(allowed.size(), kVocabulary.size());
  const std::vector<int32_t> ids = testing::allowed_ids_of(allowed);
  EXPECT_EQ(ids.size(), count);
  return ids;
}

using Ids = std::vector<int32_t>;

TEST(JsonTokenMask, AllowsExactlyTheTokensWhoseBytesAllFollow) {
  const JsonTokenMask mask(kVocabulary);
  EXPECT_EQ(mask.vocab_size(), static_cast<int32_t>(kVocabulary.size()));
  EXPECT_EQ(mask.bytes(6), "\":");
  EXPECT_EQ(allowed_ids(mask, ""), (Ids{1, 3, 7, 14}));
  EXPECT_EQ(allowed_ids(mask, "{"), (Ids{2, 4, 6, 7, 11, 14}));  // "\":" and "\"}" open a key
  // In a key, anything but controls, and a closing quote only if ':' or whitespace follows.
  EXPECT_EQ(allowed_ids(mask, "{\""), (Ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 16, 17, 19, 20}));
  EXPECT_EQ(allowed_ids(mask, "{\"key\""), (Ids{7, 14, 20}));
  EXPECT_EQ(allowed_ids(mask, "{\"key\":"), (Ids{1, 3, 4, 6, 7, 8, 9, 11, 12, 14}));
  EXPECT_EQ(allowed_ids(mask, "{\"key\":1"), (Ids{2, 7, 8, 9, 10, 14, 17}));  // "e9": an exponent
  EXPECT_EQ(allowed_ids(mask, "{\"key\":[1"), (Ids{7, 8, 9, 10, 13, 14, 17}));
  EXPECT_EQ(allowed_ids(mask, "{\"key\":\"\\u"), (Ids{8, 9, 17}));  // hex digits only
  // Once the object has closed nothing is allowed: the request ends there.
  EXPECT_EQ(allowed_ids(mask, "{}"), Ids{});
}

TEST(JsonTokenMask, EqualsTryingEveryTokenOnARandomVocabulary) {
  // Tokens of 1-4 bytes from JSON's punctuation, escapes, literals, digits, controls and UTF-8,
  // so that the first-byte groups and the plain-string shortcut meet every kind of token.
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]:,\" \\/ \t\nabdeflnrstuDE019+-.\x01\x1f\x7f\xC3\xA9\xFF";
  std::vector<std::string> vocabulary(3000);
  for (size_t id = 1; id < vocabulary.size(); ++id)  // id 0 stays empty
    for (size_t n = 1 + rng() % 4; n > 0; --n) vocabulary[id] += alphabet[rng() % alphabet.size()];
  const JsonTokenMask mask(vocabulary);
  std::vector<uint8_t> allowed;
  for (int walk = 0; walk < 40; ++walk) {
    JsonObjectPrefix prefix;
    for (int step = 0; step < 30 && !prefix.complete(); ++step) {
      const size_t count = mask.allowed_tokens(prefix, allowed);
      std::vector<int32_t> fitting;
      for (size_t id = 0; id < vocabulary.size(); ++id) {
        JsonObjectPrefix next = prefix;
        const bool fits = !vocabulary[id].empty() && next.advance(vocabulary[id]);
        ASSERT_EQ(allowed[id] != 0, fits) << "token " << id << " \"" << vocabulary[id] << "\" at step " << step;
        if (fits) fitting.push_back(static_cast<int32_t>(id));
      }
      ASSERT_EQ(count, fitting.size());
      ASSERT_FALSE(fitting.empty());
      ASSERT_TRUE(prefix.advance(vocabulary[static_cast<size_t>(fitting[rng() % fitting.size()])]));
    }
  }
}

TEST(JsonTokenMask, RandomWalksAlongTheMaskStayValid) {
  // Every pick of the allowed tokens keeps a prefix; walks that close the object parse.
  const JsonTokenMask mask(kVocabulary);
  std::mt19937 rng(7);
  int closed = 0;
  for (int walk = 0; walk < 500; ++walk) {
    JsonObjectPrefix prefix;
    std::string text;
    std::vector<uint8_t> allowed;
    for (int step = 0; step < 40 && !prefix.complete(); ++step) {
      ASSERT_GT(mask.allowed_tokens(prefix, allowed), 0u) << text;
      const std::vector<int32_t> ids = testing::allowed_ids_of(allowed);
      const int32_t id = ids[rng() % ids.size()];
      ASSERT_TRUE(prefix.advance(mask.bytes(id)));
      text += mask.bytes(id);
    }
    if (prefix.complete()) {
      ++closed;
      EXPECT_TRUE(nlohmann_says_object(text)) << text;
    }
  }
  EXPECT_GT(closed, 50);
}

}  // namespace
}  // namespace dsv4
