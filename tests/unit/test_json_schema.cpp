// JSON Schema constraints (sampling/json_schema.h): what the compiler refuses (with the part at
// fault named), which documents the byte-level checker takes whole and where it refuses the others,
// recursive $refs, and random walks along the token mask that always end in a document the schema
// accepts (checked here independently of the checker), never in a dead end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/json_schema.h"
#include "sampling/json_token_mask.h"
#include "token_mask_test_util.h"

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

// The path JsonSchemaError names for `schema`, or "(compiled)" when it compiles.
std::string error_path(std::string_view schema) {
  try {
    compiled(schema);
  } catch (const JsonSchemaError& e) {
    return e.path();
  }
  return "(compiled)";
}

constexpr std::string_view kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 6},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "bb", "bc"]}, "maxItems": 3, "uniqueItems": true},
    "kind": {"anyOf": [{"$ref": "#/$defs/Kind"}, {"type": "null"}]},
    "score": {"type": ["number", "null"]}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"Kind": {"type": "object", "properties": {"x": {"type": "boolean"}}, "additionalProperties": false}}
})";

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingThePart) {
  EXPECT_EQ(error_path(R"({"type": "thing"})"), "/type");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"type": 5}}})"), "/properties/a/type");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/B"}}})"), "/properties/a/$ref");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"$ref": "http://x/y"}}})"), "/properties/a/$ref");
  EXPECT_EQ(error_path(R"({"type": "string"})"), "");  // the root must allow an object
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a\"b": {}}})"), "/properties/a\"b");
  EXPECT_EQ(error_path(R"({"type": "object", "required": ["z"], "additionalProperties": false})"), "/required");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": false}})"), "/properties/a");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"type": "string", "enum": [1, 2]}}})"), "/properties/a");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"enum": ["x\\y"]}}})"), "/properties/a/enum");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": 1}}})"),
            "/properties/a/uniqueItems");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"type": "array", "items": {"enum": ["x", "y"]},
      "uniqueItems": true, "minItems": 3}}})"), "/properties/a");  // two distinct strings cannot make three
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"enum": ["x", "yz"], "minLength": 3}}})"),
            "/properties/a");  // no enum string is long enough
  ordered_json many = {{"type", "object"}, {"properties", ordered_json::object()}};
  for (int i = 0; i < 65; ++i) many["properties"]["p" + std::to_string(i)] = ordered_json::object();
  EXPECT_EQ(error_path(many.dump()), "/properties");
  EXPECT_EQ(error_path(kPerson), "(compiled)");
  // A chain of references deeper than the compiler recurses is refused, not a stack overflow.
  ordered_json chain = {{"$ref", "#/$defs/d0"}, {"$defs", ordered_json::object()}};
  for (int i = 0; i < 5000; ++i) chain["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  chain["$defs"]["d5000"] = {{"type", "object"}};
  EXPECT_NE(error_path(chain.dump()), "(compiled)");
  // A reference to itself takes any value.
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"$ref": "#/$defs/A"}}})"),
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
      {R"({"tags": ["a", "a"])", 16},           // uniqueItems: "a" once
      {R"({"tags": ["bb", "bb)", 18},           // bb is there; only bc goes on with b
      {R"({"tags": ["a", "bb", "bc",)", 25},    // none is left for a fourth element
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
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"l": {"minItems": 3, "maxItems": 2}}})"),
            "/properties/l/minItems");
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
  // An enum's strings outside the bounds are not offered.
  const auto short_enum = compiled(R"({"type": "object", "properties": {"e": {"enum": ["x", "yz"], "minLength": 2}}})");
  EXPECT_EQ(refused_at(*short_enum, R"({"e": "x")"), 7);
  EXPECT_TRUE(accepted(*short_enum, R"({"e": "yz"})"));
  for (const char* bad : {R"({"type": "string", "minLength": -1})", R"({"type": "string", "maxLength": 1.5})",
                          R"({"type": "string", "minLength": 4, "maxLength": 3})"}) {
    const std::string path = error_path(std::string(R"({"type": "object", "properties": {"s": )") + bad + "}}");
    EXPECT_EQ(path.rfind("/properties/s/", 0), 0u) << bad << ": " << path;
  }
}

// Tuples: prefixItems (pydantic's Tuple[int, str]) or draft 7's items array, then items /
// additionalItems for the rest (false: none).
TEST(JsonSchema, TuplesTakeAnElementSchemaPerPosition) {
  const auto schema = compiled(R"({"type": "object", "properties": {
      "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2},
      "head": {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"}},
      "old": {"type": "array", "items": [{"type": "string"}], "additionalItems": false},
      "none": {"type": "array", "items": false}}})");
  for (std::string_view doc : {R"({"pair": [1, "a"]})", R"({"head": [true, null, null]})", R"({"head": []})",
                               R"({"old": ["x"], "none": []})"})
    EXPECT_TRUE(accepted(*schema, doc)) << doc << " refused at " << refused_at(*schema, doc);
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"pair": ["a")", 10},         // the first is an integer
      {R"({"pair": [1, 2)", 13},        // the second a string
      {R"({"pair": [1])", 11},          // minItems 2
      {R"({"pair": [1, "a",)", 16},     // maxItems 2
      {R"({"head": [null)", 10},        // the first is a boolean
      {R"({"head": [true, 1)", 16},     // the rest null
      {R"({"old": ["x",)", 12},         // additionalItems false
      {R"({"none": [1)", 10},           // items false: no element
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*schema, doc), at) << doc;
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
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (v[i] == v[j]) return false;  // uniqueItems
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

// Random walks along the mask over `vocab` (plus every printable byte as a token of its own, as
// byte-level vocabularies have: a walk can only get stuck if the checker leads it where nothing
// may follow). At every step the mask must equal trying every token; each finished walk must be a
// document `valid` takes. Returns how many walks finished.
int random_walks(const JsonSchema& schema, std::vector<std::string> vocab, const std::function<bool(const json&)>& valid,
                 uint32_t seed) {
  for (char c = ' '; c <= '~'; ++c) vocab.emplace_back(1, c);
  const JsonTokenMask mask(vocab);
  std::mt19937 rng(seed);
  std::vector<uint8_t> allowed;
  int finished = 0;
  for (int walk = 0; walk < 300; ++walk) {
    JsonSchemaPrefix prefix(&schema);
    std::string text;
    for (int step = 0; step < 200 && !prefix.complete(); ++step) {
      if (mask.allowed_tokens(prefix, allowed) == 0) {
        ADD_FAILURE() << "dead end after " << text;
        return finished;
      }
      // The mask's shortcuts (first-byte groups, plain string tokens within maxLength) equal
      // trying every token.
      for (size_t id = 0; id < vocab.size(); ++id) {
        JsonSchemaPrefix next = prefix;
        const bool fits = !vocab[id].empty() && next.advance(vocab[id]);
        if ((allowed[id] != 0) != fits) {
          ADD_FAILURE() << text << " + \"" << vocab[id] << "\": mask " << int{allowed[id]} << ", advance " << fits;
          return finished;
        }
      }
      // Prefer closing tokens as the walk gets long, so that most walks finish.
      const std::vector<int32_t> ids = testing::allowed_ids_of(allowed);
      int32_t pick = ids[rng() % ids.size()];
      if (step > 60)
        for (int32_t id : ids)
          if (vocab[static_cast<size_t>(id)] == "}" || vocab[static_cast<size_t>(id)] == "]" ||
              vocab[static_cast<size_t>(id)] == "\"}")
            pick = id;
      EXPECT_TRUE(prefix.advance(vocab[static_cast<size_t>(pick)])) << text << " + " << vocab[static_cast<size_t>(pick)];
      text += vocab[static_cast<size_t>(pick)];
    }
    if (!prefix.complete()) continue;
    ++finished;
    try {
      EXPECT_TRUE(valid(json::parse(text))) << text;
    } catch (const json::out_of_range&) {
      // A number past a double: JSON sets no bound, nlohmann does; not checked further.
    } catch (const json::parse_error& e) {
      ADD_FAILURE() << e.what() << ": " << text;
    }
  }
  return finished;
}

TEST(JsonSchema, RandomWalksAlongTheMaskEndInDocumentsTheSchemaAccepts) {
  const auto schema = compiled(kPerson);
  const std::vector<std::string> vocab = {"{", "}", "[", "]", ",", ":", " ", "\"", "\"name\"", "\"age\"", "\"tags\"",
                                          "\"kind\"", "\"score\"", "na", "me", "ag", "e\"", "1", "2.5", "-", "0", "e3",
                                          "true", "null", "false", "\"a\"", "\"b", "b\"", "c\"", "x", "\":", "\"x\": ",
                                          "{\"", "[\"", "\"}", ", \"", "hello", "\\n", "\\u00e9", ""};
  EXPECT_GT(random_walks(*schema, vocab, person_valid, 7), 100);
}

// minimum / maximum / exclusiveMinimum / exclusiveMaximum, as a validator reading doubles takes
// them: the number ends in range, and a bounded number takes no exponent.
constexpr std::string_view kMeasure = R"({
  "type": "object",
  "properties": {
    "age": {"type": "integer", "minimum": 18, "maximum": 120},
    "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "t": {"type": ["number", "null"], "minimum": -2.5, "exclusiveMaximum": -0.5},
    "old": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
    "step": {"type": "number", "multipleOf": 5, "maximum": 100}
  },
  "required": ["age"],
  "additionalProperties": false
})";

bool measure_valid(const json& d) {
  if (!d.is_object() || !d.contains("age")) return false;
  for (const auto& [key, v] : d.items()) {
    if (key == "age" && !(v.is_number_integer() && v.get<int64_t>() >= 18 && v.get<int64_t>() <= 120)) return false;
    if (key == "ratio" && !(v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1)) return false;
    if (key == "t" && !(v.is_null() || (v.is_number() && v.get<double>() >= -2.5 && v.get<double>() < -0.5))) return false;
    if (key == "old" && !(v.is_number() && v.get<double>() > 0)) return false;
    if (key == "step" && !(v.is_number() && std::fmod(v.get<double>(), 5) == 0 && v.get<double>() <= 100)) return false;
    if (key != "age" && key != "ratio" && key != "t" && key != "old" && key != "step") return false;
  }
  return true;
}

TEST(JsonSchema, NumbersKeepTheirBounds) {
  const auto schema = compiled(kMeasure);
  for (std::string_view doc : {R"({"age": 18})", R"({"age": 120, "ratio": 1})", R"({"age": 40, "ratio": 0.001})",
                               R"({"age": 99, "t": -2.5, "old": 0.5})", R"({"age": 30, "t": -0.50001})",
                               R"({"age": 30, "t": null, "ratio": 0.1})"})
    EXPECT_TRUE(accepted(*schema, doc)) << doc << " refused at " << refused_at(*schema, doc);
  EXPECT_TRUE(accepted(*schema, R"({"age": 20, "step": 95, "old": 1.0})"));
  EXPECT_TRUE(accepted(*schema, R"({"age": 20, "step": -10.0})"));
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"age": 17})", 9},       // no number that begins with 17 is in [18, 120]
      {R"({"age": 121})", 10},
      {R"({"age": 12})", 10},      // 12 could still become 120, but it ends
      {R"({"age": 5.)", 9},        // an integer
      {R"({"age": 2e1)", 9},       // no exponent in a bounded number
      {R"({"age": -)", 8},         // no negative age
      {R"({"ratio": 0})", 11},     // 0 is excluded
      {R"({"ratio": 2)", 10},      // nothing from 2 on is at most 1
      {R"({"ratio": 1.01)", 13},
      {R"({"t": -0.5})", 10},      // -0.5 is excluded
      {R"({"t": -3)", 7},
      {R"({"t": 1)", 6},
      {R"({"old": 0,)", 9},        // draft 4's exclusiveMinimum: true
      {R"({"step": 7,)", 10},      // 7 could become 70, but it ends
      {R"({"step": 5.5)", 11},     // a multiple is an integer
      {R"({"step": 105)", 11},
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*schema, doc), at) << doc;
  // Bounds that leave no integer remove integers; a bound must be a number.
  const auto only_null = compiled(R"({"type": "object", "properties": {"n": {"type": ["integer", "null"], "minimum": 0.2,
      "maximum": 0.8}}})");
  EXPECT_EQ(refused_at(*only_null, R"({"n": 0)"), 6);
  EXPECT_TRUE(accepted(*only_null, R"({"n": null})"));
  for (const char* bad : {R"({"type": "integer", "minimum": "1"})", R"({"type": "integer", "minimum": 5, "maximum": 4})",
                          R"({"type": "number", "exclusiveMaximum": [1]})", R"({"type": "number", "multipleOf": 0})",
                          R"({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6})"}) {
    const std::string path = error_path(std::string(R"({"type": "object", "properties": {"n": )") + bad + "}}");
    EXPECT_EQ(path.rfind("/properties/n", 0), 0u) << bad << ": " << path;
  }
  // A step that is not an integer is not checked.
  const auto halves = compiled(R"({"type": "object", "properties": {"h": {"type": "number", "multipleOf": 0.5}}})");
  EXPECT_TRUE(accepted(*halves, R"({"h": 1.25})"));
  // anyOf keeps the bounds of its only number alternative.
  const auto alternatives = compiled(R"({"type": "object", "properties": {"n": {"anyOf": [{"type": "integer",
      "minimum": 10}, {"type": "string"}]}}})");
  EXPECT_EQ(refused_at(*alternatives, R"({"n": 9})"), 7);
  EXPECT_TRUE(accepted(*alternatives, R"({"n": 10})"));
}

// allOf: the parts' constraints at once. Pydantic writes a described sub-model as a one-part allOf
// around its $ref; types, bounds and enums intersect; two parts with properties are refused.
TEST(JsonSchema, AllOfTakesEveryPartsConstraints) {
  const auto schema = compiled(R"({"type": "object", "properties": {
      "home": {"allOf": [{"$ref": "#/$defs/Address"}], "description": "where they live"},
      "n": {"allOf": [{"type": "integer"}, {"minimum": 5}, {"maximum": 9}]},
      "tag": {"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c", "d"]}]},
      "s": {"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 3}]},
      "list": {"allOf": [{"type": "array", "items": {"type": "integer"}}, {"maxItems": 2}]}},
      "additionalProperties": false,
      "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                            "additionalProperties": false}}})");
  EXPECT_TRUE(accepted(*schema, R"({"home": {"city": "x"}, "n": 7, "tag": "b", "s": "ab", "list": [1, 2]})"));
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"home": {"street": 1})", 11},  // Address's properties only
      {R"({"home": {}})", 10},            // city is required
      {R"({"n": 4})", 6},                 // minimum 5
      {R"({"n": 7.5)", 7},                // an integer
      {R"({"tag": "a")", 9},              // in both enums only: b, c
      {R"({"s": "a")", 8},                // minLength 2
      {R"({"s": "abcd")", 10},            // maxLength 3
      {R"({"list": ["x"])", 10},          // integer items
      {R"({"list": [1, 2, 3])", 14},      // maxItems 2: no third element
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*schema, doc), at) << doc;
  EXPECT_EQ(error_path(R"({"type": "object", "allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})"), "/allOf/1");
  EXPECT_EQ(error_path(R"({"type": "object", "allOf": [{"properties": {"a": {}}}], "properties": {"b": {}}})"), "/properties");
  EXPECT_EQ(error_path(R"({"type": "object", "allOf": []})"), "/allOf");
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"x": {"allOf": [{"type": "string"}, {"type": "integer"}]}}})"),
            "/properties/x");  // no value is both
}

// format: date, time, date-time, uuid (StringFormatCursor), checked here by an independent parse.
bool date_valid(const std::string& d) {
  static const std::regex shape(R"(\d{4}-\d{2}-\d{2})");
  if (!std::regex_match(d, shape)) return false;
  const std::chrono::year_month_day ymd{std::chrono::year(std::stoi(d.substr(0, 4))),
                                        std::chrono::month(static_cast<unsigned>(std::stoi(d.substr(5, 2)))),
                                        std::chrono::day(static_cast<unsigned>(std::stoi(d.substr(8, 2))))};
  return ymd.ok() && std::stoi(d.substr(0, 4)) >= 1;
}
bool time_valid(const std::string& t) {
  static const std::regex shape(R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))");
  return std::regex_match(t, shape);
}
bool uuid_valid(const std::string& u) {
  static const std::regex shape(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
  return std::regex_match(u, shape);
}

constexpr std::string_view kFormats = R"({"type": "object", "properties": {
    "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "time"},
    "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"},
    "note": {"type": "string", "format": "uri"}},
  "required": ["day"], "additionalProperties": false})";

bool formats_valid(const json& d) {
  if (!d.is_object() || !d.contains("day")) return false;
  for (const auto& [key, v] : d.items()) {
    if (!v.is_string()) return false;
    const std::string s = v.get<std::string>();
    if (key == "day" && !date_valid(s)) return false;
    if (key == "at" && !time_valid(s)) return false;
    if (key == "when" && !(s.size() > 11 && s[10] == 'T' && date_valid(s.substr(0, 10)) && time_valid(s.substr(11))))
      return false;
    if (key == "id" && !uuid_valid(s)) return false;
    if (key != "day" && key != "at" && key != "when" && key != "id" && key != "note") return false;
  }
  return true;
}

TEST(JsonSchema, StringsKeepTheirFormats) {
  const auto schema = compiled(kFormats);
  for (std::string_view doc : {R"({"day": "2024-02-29"})", R"({"day": "1999-12-31", "at": "23:59:59Z"})",
                               R"({"day": "2000-02-29", "at": "08:00:00.123456+05:30"})",
                               R"({"day": "0001-01-01", "when": "2026-12-02T04:55:00-08:00"})",
                               R"({"day": "2026-01-31", "id": "123e4567-E89b-12d3-a456-426614174000"})",
                               R"({"day": "2026-01-31", "note": "not checked"})"})
    EXPECT_TRUE(accepted(*schema, doc)) << doc << " refused at " << refused_at(*schema, doc);
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"day": "2023-02-29"})", 18},        // 2023 is no leap year
      {R"({"day": "1900-02-29"})", 18},        // nor is 1900
      {R"({"day": "2024-04-31"})", 18},        // April has 30 days
      {R"({"day": "2024-13")", 15},            // no thirteenth month
      {R"({"day": "0000)", 12},                // no year 0
      {R"({"day": "2024-01-0"})", 18},         // a day needs its second digit
      {R"({"day": "2024-1-01"})", 15},
      {R"({"day": "2024-01-01", "at": "24)", 30},  // hours to 23
      {R"({"day": "2024-01-01", "at": "12:60)", 32},
      {R"({"day": "2024-01-01", "at": "12:00:00"})", 37},      // an offset or Z must end it
      {R"({"day": "2024-01-01", "at": "12:00:00.1234567)", 44},  // at most six fraction digits
      {R"({"day": "2024-01-01", "at": "12:00:00.Z)", 38},
      {R"({"day": "2024-01-01", "when": "2024-01-01 12)", 41},  // 'T' between date and time
      {R"({"day": "2024-01-01", "id": "123e4567-e89b-12d3-a456-42661417400g)", 64},
      {R"({"day": "2024-01-01", "id": "123e4567e)", 37},
      {R"({"day": "2024\u002d)", 13},          // no escapes in a formatted string
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*schema, doc), at) << doc;
  // An enum keeps the strings of its format; length bounds leave a format unchecked.
  const auto days = compiled(R"({"type": "object", "properties": {"d": {"format": "date", "enum": ["2024-02-30", "2024-02-29"]},
      "free": {"type": "string", "format": "date", "maxLength": 20}}})");
  EXPECT_EQ(refused_at(*days, R"({"d": "2024-02-30")"), 15);
  EXPECT_TRUE(accepted(*days, R"({"d": "2024-02-29", "free": "tomorrow"})"));
  EXPECT_EQ(error_path(R"({"type": "object", "properties": {"d": {"type": "string", "format": 7}}})"),
            "/properties/d/format");
}

TEST(JsonSchema, RandomWalksKeepStringsInTheirFormats) {
  const auto schema = compiled(kFormats);
  const std::vector<std::string> vocab = {"{", "}", ",", ":", " ", "\"day\"", "\"at\"", "\"when\"", "\"id\"",
                                          "\"note\"", "\"", "20", "2024", "-0", "-1", "-", "01", "12", "29", "30",
                                          "31", "T", "Z", ":", ":00", ".5", "+", "+05", "ab", "e8", "\"}", "\",", ""};
  EXPECT_GT(random_walks(*schema, vocab, formats_valid, 17), 100);
}

// format: email, ipv4, ipv6, hostname (string_format_pattern, a whole match of a pattern), checked
// here by splitting the value by hand.
std::vector<std::string> split(const std::string& s, char by) {
  std::vector<std::string> parts(1);
  for (const char c : s) {
    if (c == by) parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}
bool label_valid(const std::string& l) {  // RFC 1123
  const auto inner = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; };
  return !l.empty() && l.size() <= 63 && l.front() != '-' && l.back() != '-' && std::all_of(l.begin(), l.end(), inner);
}
bool hostname_valid(const std::string& h) {
  const std::vector<std::string> labels = split(h, '.');
  return std::all_of(labels.begin(), labels.end(), label_valid);
}
bool email_valid(const std::string& e) {
  const std::vector<std::string> at = split(e, '@');
  if (at.size() != 2) return false;
  const auto atom = [](const std::string& a) {
    return !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_%+-").find(c) != std::string_view::npos;
    });
  };
  const std::vector<std::string> local = split(at[0], '.'), domain = split(at[1], '.');
  const std::string& top = domain.back();
  const auto letter = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  return std::all_of(local.begin(), local.end(), atom) && domain.size() >= 2 && hostname_valid(at[1]) &&
         top.size() >= 2 && std::all_of(top.begin(), top.end(), letter);
}
bool ipv4_valid(const std::string& a) {
  const std::vector<std::string> octets = split(a, '.');
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return octets.size() == 4 && std::all_of(octets.begin(), octets.end(), [&](const std::string& o) {
           return !o.empty() && o.size() <= 3 && std::all_of(o.begin(), o.end(), digit) &&
                  (o.size() == 1 || o[0] != '0') && std::stoi(o) <= 255;
         });
}
bool ipv6_valid(const std::string& a) {
  const auto groups_valid = [](const std::string& part, size_t* count) {
    *count = 0;
    if (part.empty()) return true;
    const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
    for (const std::string& g : split(part, ':')) {
      if (g.empty() || g.size() > 4 || !std::all_of(g.begin(), g.end(), hex)) return false;
      ++*count;
    }
    return true;
  };
  const size_t gap = a.find("::");
  size_t left = 0, right = 0;
  if (gap == std::string::npos) return groups_valid(a, &left) && left == 8;
  if (a.find("::", gap + 1) != std::string::npos) return false;
  return groups_valid(a.substr(0, gap), &left) && groups_valid(a.substr(gap + 2), &right) && left + right <= 7;
}

constexpr std::string_view kPatternFormats = R"({"type": "object", "properties": {
    "mail": {"type": "string", "format": "email"}, "ip4": {"type": "string", "format": "ipv4"},
    "ip6": {"type": "string", "format": "ipv6"}, "host": {"type": "string", "format": "hostname"}},
  "additionalProperties": false})";

bool pattern_formats_valid(const json& d) {
  if (!d.is_object()) return false;
  for (const auto& [key, v] : d.items()) {
    if (!v.is_string()) return false;
    const std::string s = v.get<std::string>();
    if (!(key == "mail" ? email_valid(s) : key == "ip4" ? ipv4_valid(s) : key == "ip6" ? ipv6_valid(s)
          : key == "host"  ? hostname_valid(s) : false))
      return false;
  }
  return true;
}

TEST(JsonSchema, StringsKeepTheirPatternFormats) {
  const auto schema = compiled(kPatternFormats);
  for (std::string_view doc :
       {R"({"mail": "first.last+tag@mail.example.com"})", R"({"mail": "a_b%c@x-y.io"})",
        R"({"ip4": "255.255.255.255", "ip6": "2001:db8::ff00:42:8329"})", R"({"ip4": "0.0.0.0", "ip6": "::"})",
        R"({"ip6": "1:2:3:4:5:6:7:8"})", R"({"ip6": "1:2:3:4:5:6:7::"})", R"({"ip6": "::ffff"})",
        R"({"host": "localhost"})", R"({"host": "a-1.example.org"})"}) {
    EXPECT_TRUE(accepted(*schema, doc)) << doc << " refused at " << refused_at(*schema, doc);
    EXPECT_TRUE(pattern_formats_valid(json::parse(doc))) << doc;
  }
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"mail": "no-at-sign"})", 20},        // the closing quote before '@'
      {R"({"mail": ".a@b.co"})", 10},           // no leading dot
      {R"({"mail": "a..b@c.co"})", 12},         // nor a doubled one
      {R"({"mail": "a@b"})", 13},               // a domain of two labels at least
      {R"({"mail": "a@b.c1"})", 16},            // the top-level label is letters (c1 could be inner)
      {R"({"mail": "a@-b.co"})", 12},           // labels start with a letter or digit
      {R"({"ip4": "256)", 11},                  // octets to 255
      {R"({"ip4": "01)", 10},                   // no leading zeros
      {R"({"ip4": "1.2.3"})", 14},
      {R"({"ip4": "1.2.3.4.)", 16},
      {R"({"ip6": "1::2::)", 14},               // one "::" at most
      {R"({"ip6": "12345)", 13},                // groups of four digits at most
      {R"({"ip6": "1:2:3:4:5:6:7:8:)", 24},     // eight groups at most
      {R"({"ip6": "1:2"})", 12},
      {R"({"host": "a_b)", 11},
      {R"({"host": "ab-"})", 13},               // a label does not end with a hyphen
      {R"({"host": "a\u002d)", 11},        // no escapes in a formatted string
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*schema, doc), at) << doc;
  // An enum keeps the strings of its format; length bounds, another pattern or another format
  // beside it leave such a format unchecked.
  const auto others = compiled(R"({"type": "object", "properties": {
      "m": {"format": "email", "enum": ["nobody", "a@b.co"]},
      "free": {"type": "string", "format": "ipv4", "maxLength": 20},
      "p": {"type": "string", "format": "hostname", "pattern": "[a-z_]+"},
      "d": {"allOf": [{"format": "date"}, {"format": "email"}]}}})");
  EXPECT_EQ(refused_at(*others, R"({"m": "nobody")"), 7);
  EXPECT_TRUE(accepted(*others, R"({"m": "a@b.co", "free": "10.0.0.999", "p": "a_b", "d": "2024-01-01"})"));
}

TEST(JsonSchema, RandomWalksKeepStringsInTheirPatternFormats) {
  const auto schema = compiled(kPatternFormats);
  const std::vector<std::string> vocab = {"{", "}", ",", ":", " ", "\"mail\"", "\"ip4\"", "\"ip6\"", "\"host\"",
                                          "\"", "a", "b.", "@", ".", "co", "com", "-", "_", "+", "1", "25", "255",
                                          "0", "::", "ff", "db8", "x1", "\"}", "\",", ""};
  EXPECT_GT(random_walks(*schema, vocab, pattern_formats_valid, 23), 100);
}

// pattern: a whole match of the regex (as vLLM and outlines read it), checked here with std::regex.
constexpr std::string_view kPatterns = R"({"type": "object", "properties": {
    "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
    "word": {"type": "string", "pattern": "(yes|no)+"},
    "tag": {"enum": ["ab", "cd", "x"], "pattern": "[a-c]+"},
    "maybe": {"anyOf": [{"type": "string", "pattern": "a+\u00e9?"}, {"type": "null"}]}},
  "required": ["code"], "additionalProperties": false})";

bool patterns_valid(const json& d) {
  static const std::regex code(R"([A-Z]{2}-\d{3})"), word("(yes|no)+"), maybe("a+(\xC3\xA9)?");
  if (!d.is_object() || !d.contains("code")) return false;
  for (const auto& [key, v] : d.items()) {
    if (key == "maybe" && v.is_null()) continue;
    if (!v.is_string()) return false;
    const std::string s = v.get<std::string>();
    if (key == "code" && !std::regex_match(s, code)) return false;
    if (key == "word" && !std::regex_match(s, word)) return false;
    if (key == "tag" && s != "ab") return false;
    if (key == "maybe" && !std::regex_match(s, maybe)) return false;
  }
  return true;
}

TEST(JsonSchema, StringsMatchTheirPatternsWhole) {
  const auto schema = compiled(kPatterns);
  for (std::string_view doc : {R"({"code": "AB-123"})", R"({"code": "ZZ-000", "word": "yesnoyes"})",
                               R"({"code": "AB-123", "tag": "ab"})", "{\"code\": \"AB-123\", \"maybe\": \"a\xC3\xA9\"}",
                               R"({"code": "AB-123", "maybe": null})"})
    EXPECT_TRUE(accepted(*schema, doc)) << doc << " refused at " << refused_at(*schema, doc);
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"code": "AB-12"})", 15},                    // the closing quote before a whole match
      {R"({"code": "A1)", 11},
      {R"({"code": "AB-1234)", 16},                     // past the match: no more characters
      {R"({"code": "AB\u002d)", 12},                    // no escapes in a patterned string
      {R"({"code": "AB-123", "tag": "cd"})", 27},       // an enum string the pattern refuses is out
      {R"({"code": "AB-123", "word": "yesn"})", 32},
  };
  for (const auto& [doc, at] : cases) EXPECT_EQ(refused_at(*schema, doc), at) << doc;
  const auto property = [](std::string_view spec) {
    return R"({"type": "object", "properties": {"p": )" + std::string(spec) + "}}";
  };
  EXPECT_EQ(error_path(property(R"({"type": "string", "pattern": 7})")), "/properties/p/pattern");
  EXPECT_EQ(error_path(property(R"j({"type": "string", "pattern": "a(?=b)"})j")), "/properties/p/pattern");
  EXPECT_EQ(error_path(property(R"({"type": "string", "pattern": "a", "maxLength": 3})")), "/properties/p/pattern");
  EXPECT_EQ(error_path(property(R"({"type": "string", "pattern": "a", "format": "date"})")), "/properties/p/pattern");
  EXPECT_EQ(error_path(property(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})")), "/properties/p/allOf/1");
  EXPECT_EQ(error_path(property(R"({"allOf": [{"pattern": "a"}, {"minLength": 1}]})")), "/properties/p/pattern");
  try {
    compiled(property(R"({"type": "string", "pattern": "(a)\\1"})"));
    ADD_FAILURE() << "a backreference was accepted";
  } catch (const JsonSchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("the backreference '\\1' at offset 3"), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, RandomWalksKeepStringsInTheirPatterns) {
  const auto schema = compiled(kPatterns);
  const std::vector<std::string> vocab = {"{", "}", ",", ":", " ", "\"code\"", "\"word\"", "\"tag\"", "\"maybe\"",
                                          "\"", "AB", "-1", "12", "123", "yes", "no", "yesno", "ab", "aa",
                                          "a\xC3\xA9", "\xC3", "\xA9", "null", "\"}", "\",", ""};
  EXPECT_GT(random_walks(*schema, vocab, patterns_valid, 19), 100);
}

TEST(JsonSchema, RandomWalksKeepNumbersInTheirBounds) {
  const auto schema = compiled(kMeasure);
  const std::vector<std::string> vocab = {"{", "}", ",", ":", " ", "\"age\"", "\"ratio\"", "\"t\"", "\"old\"", "\"step\"",
                                          "\"", "1", "12", "120", "9", "99", "0", "0.", ".5", "-", "-0", "-2", ".",
                                          "e3", "E", "5", "null", "25", "1.0", "0.0", "00", ""};
  EXPECT_GT(random_walks(*schema, vocab, measure_valid, 13), 100);
}

}  // namespace
}  // namespace dsv4
