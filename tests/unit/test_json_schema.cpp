// JSON Schema constraints (sampling/json_schema.h): what the compiler refuses (with the part at
// fault named), which documents the byte-level checker takes whole and where it refuses the others,
// recursive $refs, and random walks along the token mask that always end in a document the schema
// accepts (checked here independently of the checker), never in a dead end.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/json_schema.h"
#include "sampling/json_token_mask.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> compiled(std::string_view schema) { return JsonSchema::compile(ordered_json::parse(schema)); }

// Where `text` is refused (its byte index), or -1 when every byte is taken; `whole` tells whether
// the object closed at the end.
int refused_at(const JsonSchema& schema, std::string_view text, bool* whole = nullptr) {
  JsonSchemaPrefix prefix(&schema);
  for (size_t i = 0; i < text.size(); ++i)
    if (!prefix.advance(text[i])) return static_cast<int>(i);
  if (whole) *whole = prefix.complete();
  return -1;
}

bool accepted(const JsonSchema& schema, std::string_view text) {
  bool whole = false;
  return refused_at(schema, text, &whole) == -1 && whole;
}

constexpr std::string_view kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 6},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "bb", "bc"]}, "maxItems": 3},
    "kind": {"anyOf": [{"$ref": "#/$defs/Kind"}, {"type": "null"}]},
    "score": {"type": ["number", "null"]}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"Kind": {"type": "object", "properties": {"x": {"type": "boolean"}}, "additionalProperties": false}}
})";

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingThePart) {
  const auto path_of = [](std::string_view schema) {
    try {
      compiled(schema);
    } catch (const JsonSchemaError& e) {
      return e.path();
    }
    return std::string("(compiled)");
  };
  EXPECT_EQ(path_of(R"({"type": "thing"})"), "/type");
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a": {"type": 5}}})"), "/properties/a/type");
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/B"}}})"), "/properties/a/$ref");
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a": {"$ref": "http://x/y"}}})"), "/properties/a/$ref");
  EXPECT_EQ(path_of(R"({"type": "string"})"), "");  // the root must allow an object
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a\"b": {}}})"), "/properties/a\"b");
  EXPECT_EQ(path_of(R"({"type": "object", "required": ["z"], "additionalProperties": false})"), "/required");
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a": false}})"), "/properties/a");
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a": {"type": "string", "enum": [1, 2]}}})"), "/properties/a");
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a": {"enum": ["x\\y"]}}})"), "/properties/a/enum");
  ordered_json many = {{"type", "object"}, {"properties", ordered_json::object()}};
  for (int i = 0; i < 65; ++i) many["properties"]["p" + std::to_string(i)] = ordered_json::object();
  EXPECT_EQ(path_of(many.dump()), "/properties");
  EXPECT_EQ(path_of(kPerson), "(compiled)");
  // A chain of references deeper than the compiler recurses is refused, not a stack overflow.
  ordered_json chain = {{"$ref", "#/$defs/d0"}, {"$defs", ordered_json::object()}};
  for (int i = 0; i < 5000; ++i) chain["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  chain["$defs"]["d5000"] = {{"type", "object"}};
  EXPECT_NE(path_of(chain.dump()), "(compiled)");
  // A reference to itself takes any value.
  EXPECT_EQ(path_of(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"$ref": "#/$defs/A"}}})"),
            "(compiled)");
  try {
    compiled(R"({"type": "object", "properties": {"a": {"type": "thing"}}})");
    FAIL();
  } catch (const JsonSchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown type \"thing\""), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, TakesTheDocumentsTheSchemaAcceptsWhole) {
  const auto schema = compiled(kPerson);
  for (std::string_view doc : {R"({"name": "a", "age": 3})", R"({"age": -1, "name": "z", "tags": ["a", "bc"], "kind": null})",
                               R"({"name": "n", "age": 0, "kind": {"x": true}, "score": 1.5e3})",
                               R"( { "tags" : [ ] , "age" : 12 , "name" : "\u00e9" , "score" : null })",
                               R"({"name": "a", "age": 3, "kind": {}})"}) {
    EXPECT_TRUE(accepted(*schema, doc)) << doc << " refused at " << refused_at(*schema, doc);
    EXPECT_TRUE(json::accept(doc)) << doc;
  }
}

TEST(JsonSchema, RefusesEachViolationAtItsFirstByte) {
  const auto schema = compiled(kPerson);
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"name": 1)", 9},                     // a number where a string must be
      {R"({"age": 1.5)", 9},                    // a fraction in an integer
      {R"({"age": 1e3)", 9},                    // an exponent in an integer
      {R"({"name": "a"})", 12},                 // age is required
      {R"({"nam": 1)", 5},                      // not a property name
      {R"({"foo")", 2},                         // no property starts with f
      {R"({"name": "a", "name")", 15},          // the only name with n is present
      {R"({"tags": ["c"])", 11},                // not in the enum
      {R"({"tags": ["b"])", 12},                // a prefix of two enum strings only
      {R"({"tags": ["a\u0062"])", 12},          // an escape inside an enum string
      {R"({"kind": {"x": 1})", 15},             // a number where a boolean must be
      {R"({"kind": "x")", 9},                   // neither an object nor null
      {R"({"name":"a","age":1,"tags":[],"kind":null,"score":2,)", 51},  // no property is left
      {R"({"score": true)", 10},
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*schema, doc), at) << doc;
}

TEST(JsonSchema, OpenObjectsTakeOtherNamesWithTheAdditionalSchema) {
  const auto schema = compiled(R"({"type": "object", "properties": {"id": {"type": "integer"}},
                                   "required": ["id", "note"], "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(accepted(*schema, R"({"id": 1, "note": "x", "other": "y"})"));
  EXPECT_TRUE(accepted(*schema, R"({"idx": "s", "note": "", "id": 2})"));  // idx: an other name
  EXPECT_EQ(refused_at(*schema, R"({"other": 1)"), 10);                    // other names take strings
  EXPECT_EQ(refused_at(*schema, R"({"id": 1})"), 8);                        // note is required
  EXPECT_EQ(refused_at(*schema, R"({"id": "1")"), 7);
}

TEST(JsonSchema, ArraysKeepTheirLengthBounds) {
  const auto schema = compiled(R"({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "integer"},
                                   "minItems": 2, "maxItems": 3}, "none": {"type": "array", "maxItems": 0}}})");
  EXPECT_TRUE(accepted(*schema, R"({"l": [1, 2]})"));
  EXPECT_TRUE(accepted(*schema, R"({"l": [1, 2, 3], "none": []})"));
  EXPECT_EQ(refused_at(*schema, R"({"l": [1]})"), 8);           // one element: below minItems
  EXPECT_EQ(refused_at(*schema, R"({"l": []})"), 7);
  EXPECT_EQ(refused_at(*schema, R"({"l": [1, 2, 3, 4]})"), 14);  // the comma a fourth would need
  EXPECT_EQ(refused_at(*schema, R"({"none": [1])"), 10);
  // anyOf's array alternative keeps its bounds (the node's own absent ones do not reset them).
  const auto joined = compiled(R"({"type": "object", "properties": {"l": {"anyOf": [{"type": "array", "minItems": 2},
                                   {"type": "null"}]}}})");
  EXPECT_EQ(refused_at(*joined, R"({"l": [1]})"), 8);
  EXPECT_TRUE(accepted(*joined, R"({"l": null})"));
  EXPECT_EQ([] {
    try {
      compiled(R"({"type": "object", "properties": {"l": {"minItems": 3, "maxItems": 2}}})");
    } catch (const JsonSchemaError& e) {
      return e.path();
    }
    return std::string();
  }(), "/properties/l/minItems");
}

// minLength / maxLength count characters: a UTF-8 sequence, an escape, a surrogate pair's two
// escapes are one each; keys and strings without bounds are not counted.
TEST(JsonSchema, StringsKeepTheirLengthBounds) {
  const auto schema = compiled(R"({"type": "object", "properties": {"s": {"type": "string", "minLength": 2,
      "maxLength": 3}, "e": {"type": "string", "maxLength": 0}, "u": {"anyOf": [{"type": "string", "minLength": 2},
      {"type": "integer"}]}, "free": {"type": "string"}}})");
  EXPECT_TRUE(accepted(*schema, R"({"s": "ab"})"));
  EXPECT_TRUE(accepted(*schema, R"({"s": "abc", "e": ""})"));
  EXPECT_EQ(refused_at(*schema, R"({"s": "a"})"), 8);       // the closing quote: one character
  EXPECT_EQ(refused_at(*schema, R"({"s": "abcd"})"), 10);   // the fourth character
  EXPECT_EQ(refused_at(*schema, R"({"e": "x"})"), 7);
  EXPECT_TRUE(accepted(*schema, "{\"s\": \"\xC3\xA9\xC3\xA9\xC3\xA9\"}"));     // three two-byte characters
  EXPECT_EQ(refused_at(*schema, "{\"s\": \"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\"}"), 13);
  EXPECT_TRUE(accepted(*schema, R"({"s": "\n\t\""})"));                     // three escapes
  EXPECT_TRUE(accepted(*schema, R"({"s": "\uD83D\uDE00\u00e9x"})"));         // a pair, \u00e9, x
  EXPECT_EQ(refused_at(*schema, R"({"s": "\uD83D\uDE00\u00e9xy"})"), 26);
  EXPECT_EQ(refused_at(*schema, R"({"u": "a"})"), 8);       // anyOf's string alternative's bound
  EXPECT_TRUE(accepted(*schema, R"({"u": 12, "free": "a long string with no bound at all"})"));
  for (const char* bad : {R"({"type": "string", "minLength": -1})", R"({"type": "string", "maxLength": 1.5})",
                          R"({"type": "string", "minLength": 4, "maxLength": 3})"}) {
    const std::string schema_text = std::string(R"({"type": "object", "properties": {"s": )") + bad + "}}";
    try {
      compiled(schema_text);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const JsonSchemaError& e) {
      EXPECT_EQ(e.path().rfind("/properties/s/", 0), 0u) << e.path();
    }
  }
}

TEST(JsonSchema, RecursiveReferencesNestAsDeepAsTheTextGoes) {
  const auto schema = compiled(R"({"$ref": "#/definitions/Tree", "definitions": {"Tree": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/Tree"}}},
      "required": ["v"], "additionalProperties": false}}})");
  EXPECT_TRUE(accepted(*schema, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_EQ(refused_at(*schema, R"({"v": 1, "kids": [{"kids": []}]})"), 29);  // the inner v is required
  EXPECT_EQ(refused_at(*schema, R"({"v": 1, "kids": [{"v": 2.5)"), 25);
}

TEST(JsonSchema, WithoutASchemaItIsTheObjectSyntaxAlone) {
  JsonSchemaPrefix prefix;
  EXPECT_TRUE(prefix.advance(R"({"anything": [1, {"x": null}], "y": 2.5e1})"));
  EXPECT_TRUE(prefix.complete());
  JsonSchemaPrefix array;
  EXPECT_FALSE(array.advance('['));
}

// An independent check of kPerson's rules on a parsed document.
bool person_valid(const json& d) {
  if (!d.is_object() || !d.contains("name") || !d.contains("age")) return false;
  for (const auto& [key, v] : d.items()) {
    if (key == "name") {
      if (!v.is_string()) return false;
      size_t chars = 0;  // code points: every byte but UTF-8 continuations
      for (const char c : v.get<std::string>()) chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
      if (chars < 1 || chars > 6) return false;
    }
    // An integer past 64 bits parses as a double (an integral one).
    const bool big_integer = v.is_number_float() && std::fabs(v.get<double>()) >= 0x1p63 &&
                             std::floor(v.get<double>()) == v.get<double>();
    if (key == "age" && !v.is_number_integer() && !big_integer) return false;
    if (key == "tags") {
      if (!v.is_array() || v.size() > 3) return false;
      for (const json& t : v)
        if (!(t == "a" || t == "bb" || t == "bc")) return false;
    }
    if (key == "kind" && !v.is_null()) {
      if (!v.is_object()) return false;
      for (const auto& [k, x] : v.items())
        if (k != "x" || !x.is_boolean()) return false;
    }
    if (key == "score" && !(v.is_number() || v.is_null())) return false;
    if (key != "name" && key != "age" && key != "tags" && key != "kind" && key != "score") return false;
  }
  return true;
}

TEST(JsonSchema, RandomWalksAlongTheMaskEndInDocumentsTheSchemaAccepts) {
  const auto schema = compiled(kPerson);
  std::vector<std::string> vocab = {"{", "}", "[", "]", ",", ":", " ", "\"", "\"name\"", "\"age\"", "\"tags\"",
                                    "\"kind\"", "\"score\"", "na", "me", "ag", "e\"", "1", "2.5", "-", "0", "e3",
                                    "true", "null", "false", "\"a\"", "\"b", "b\"", "c\"", "x", "\":", "\"x\": ",
                                    "{\"", "[\"", "\"}", ", \"", "hello", "\\n", "\\u00e9", ""};
  // Every printable byte as a token of its own, as byte-level vocabularies have: a walk can only
  // get stuck if the checker leads it where nothing may follow.
  for (char c = ' '; c <= '~'; ++c) vocab.emplace_back(1, c);
  const JsonTokenMask mask(vocab);
  std::mt19937 rng(7);
  std::vector<uint8_t> allowed;
  int finished = 0;
  for (int walk = 0; walk < 300; ++walk) {
    JsonSchemaPrefix prefix(schema.get());
    std::string text;
    for (int step = 0; step < 200 && !prefix.complete(); ++step) {
      ASSERT_GT(mask.allowed_tokens(prefix, allowed), 0u) << "dead end after " << text;
      // The mask's shortcuts (first-byte groups, plain string tokens within maxLength) equal
      // trying every token.
      for (size_t id = 0; id < vocab.size(); ++id) {
        JsonSchemaPrefix next = prefix;
        const bool fits = !vocab[id].empty() && next.advance(vocab[id]);
        ASSERT_EQ(allowed[id] != 0, fits) << text << " + \"" << vocab[id] << "\"";
      }
      // Prefer closing tokens as the walk gets long, so that most walks finish.
      std::vector<int32_t> ids;
      for (size_t id = 0; id < allowed.size(); ++id)
        if (allowed[id]) ids.push_back(static_cast<int32_t>(id));
      int32_t pick = ids[rng() % ids.size()];
      if (step > 60)
        for (int32_t id : ids)
          if (vocab[static_cast<size_t>(id)] == "}" || vocab[static_cast<size_t>(id)] == "]" ||
              vocab[static_cast<size_t>(id)] == "\"}")
            pick = id;
      ASSERT_TRUE(prefix.advance(vocab[static_cast<size_t>(pick)])) << text << " + " << vocab[static_cast<size_t>(pick)];
      text += vocab[static_cast<size_t>(pick)];
    }
    if (!prefix.complete()) continue;
    ++finished;
    try {
      EXPECT_TRUE(person_valid(json::parse(text))) << text;
    } catch (const json::out_of_range&) {
      // A number past a double: JSON sets no bound, nlohmann does; not checked further.
    } catch (const json::parse_error& e) {
      ADD_FAILURE() << e.what() << ": " << text;
    }
  }
  EXPECT_GT(finished, 100);
}

}  // namespace
}  // namespace dsv4
