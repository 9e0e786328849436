// JSON Schema as the sampler enforces it (response_format json_schema): a schema compiled into
// nodes, and JsonSchemaPrefix, a byte-level checker that is JsonObjectPrefix's syntax plus the
// schema's constraints, so that the output stays a prefix of one object the schema accepts.
//
// Enforced: `type` (a name or a list; "integer" refuses fractions and exponents), `properties`,
// `required`, `additionalProperties` (false, true or a schema), `items`, `minItems` / `maxItems`,
// `minLength` / `maxLength` (of string values, in characters: code points, an escape one, a
// surrogate pair one), `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum` (the
// numbers' and the draft-4 booleans' forms; exact, json_number_range.h: a bounded number is
// written without an exponent, in at most 32 characters), `multipleOf` (integer steps; others are
// not checked), `uniqueItems` (where the items are strings of an enum of up to 64: each at most
// once), `format` date / time / date-time / uuid, and email / ipv4 / ipv6 / hostname as patterns
// (json_string_format.h; not beside minLength / maxLength, the latter four not beside a pattern
// or another format either), `pattern` (a whole match of a regex_nfa.h pattern: vLLM and outlines read a
// schema's pattern so, though JSON Schema's is a search anywhere in the string; such a string is
// written without escapes, so a pattern that needs a quote, a backslash or a control character
// cannot be met; not beside minLength / maxLength / format), tuples (`prefixItems`, or draft 7's
// `items` array with `additionalItems`; `items: false` after them), `enum` and `const` (the value types;
// strings exactly), `$ref` into "#/$defs/..." or "#/definitions/...", `anyOf` / `oneOf` (the
// alternatives' types joined; a JSON type that several alternatives allow is checked as that type
// only) and `allOf` (the parts' constraints intersected; properties and items from the one part
// that has them). Not checked, so an output may break them: other formats, multipleOf
// with a step that is not an integer, uniqueItems of other items, not, if/then/else. An enum's numbers, booleans and nulls are checked by type only. Property names and enum strings are
// matched as written: the model cannot spell them with escapes, and a schema whose names need one
// (a quote, a backslash, a control character) is refused. Objects take at most 64 named
// properties; containers below the 16th level of nesting take any value.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sampling/json_number_range.h"
#include "sampling/json_prefix.h"
#include "sampling/json_string_format.h"
#include "sampling/regex_dfa.h"

namespace dsv4 {

// A schema the compiler cannot take: `path` is the JSON pointer of the part at fault within the
// schema ("" for the root, "/properties/name/type", ...).
class JsonSchemaError : public UsageError {
 public:
  JsonSchemaError(std::string path, const std::string& what)
      : UsageError("JSON schema" + (path.empty() ? std::string() : " at " + path) + ": " + what),
        path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class JsonSchema {
 public:
  // A value's JSON types, one bit each.
  enum Type : uint8_t { kObject = 1, kArray = 2, kString = 4, kNumber = 8, kBoolean = 16, kNull = 32, kAnyType = 63 };
  static constexpr uint16_t kAny = 0;  // the node that takes any value
  static constexpr size_t kMaxProperties = 64;

  struct Node {
    uint8_t types = kAnyType;
    bool integer_only = false;          // a number must be an integer (no fraction, no exponent)
    JsonNumberRange range;              // minimum / maximum / exclusive*: a number's bounds
    std::vector<std::string> names;     // an object's named properties, sorted
    std::vector<uint16_t> property;     // per name: the node of its value
    uint64_t required = 0;              // bit i: names[i] must be present
    bool closed = false;                // additionalProperties false: only `names`
    uint16_t additional = kAny;         // the node of other properties' values
    uint16_t items = kAny;              // an array's elements (past prefix_items)
    std::vector<uint16_t> prefix_items;  // a tuple's first elements, one node each
    uint32_t min_items = 0;             // an array's length bounds
    uint32_t max_items = UINT32_MAX;
    bool unique_items = false;          // uniqueItems (checked where items are a string enum)
    uint32_t min_length = 0;            // a string's length bounds, in characters
    uint32_t max_length = UINT32_MAX;
    std::vector<std::string> strings;   // non-empty: a string must be one of these (sorted)
    StringFormat format = StringFormat::kNone;  // a string's format (json_string_format.h)
    // A string's pattern, matched whole, as a lazy DFA whose transition cache fills as prefixes
    // step it (so the prefixes of one schema advance on one thread, as the engine's do); capped at
    // kMaxPatternStates. Null: none.
    std::shared_ptr<RegexDfa> pattern;
    // The pattern is a format's (email, ipv4, ...: string_format_pattern): beside length bounds,
    // another format or another pattern it is dropped (the format not checked), not refused.
    bool pattern_from_format = false;
  };
  static constexpr size_t kMaxPatternStates = 10'000;

  // Throws JsonSchemaError naming the part at fault: a schema that is not an object or a boolean,
  // an unknown type name, a $ref outside the document's $defs / definitions, a bound that is not a
  // number, one that allows no value (bounds no number meets count as allowing no number), two
  // allOf parts with properties (or items) of their own, or properties beside such a part, a required name that additionalProperties false forbids, more than kMaxProperties
  // names, a name or enum string that needs an escape, or a root that cannot be an object.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json& schema);

  const Node& node(uint16_t id) const { return nodes_[id]; }
  uint16_t root() const { return root_; }

 private:
  friend class JsonSchemaCompiler;
  std::vector<Node> nodes_;  // nodes_[kAny] takes anything
  uint16_t root_ = kAny;
};

// The state of generated text against a schema (or, without one, JsonObjectPrefix's syntax
// alone), advanced one byte at a time; copied per candidate token, like JsonObjectPrefix. The
// schema must outlive it.
class JsonSchemaPrefix {
 public:
  static constexpr int kMaxSchemaDepth = 16;

  explicit JsonSchemaPrefix(const JsonSchema* schema = nullptr) : schema_(schema) {}

  // As JsonObjectPrefix's: whether `byte` can follow (the state moves past it if so), and whether
  // all of `bytes` can (the state is left partway when not).
  bool advance(char byte);
  bool advance(std::string_view bytes);
  bool complete() const { return syntax_.complete(); }
  // Inside a string whose bytes nothing checks but its syntax and its length bounds: how many
  // more characters of bytes >= 0x20 but '"' and '\' may follow (INT64_MAX with no maxLength),
  // or -1 elsewhere (outside strings, in escapes, in keys and enum strings, which are matched).
  int64_t plain_string_room() const {
    if (!syntax_.in_plain_string() || !(match_ == Match::kNone || match_ == Match::kUnknownKey) || format_.active() ||
        pattern_)
      return -1;
    return bounded_string_ ? static_cast<int64_t>(max_chars_) - chars_ : INT64_MAX;
  }
  // Inside a string value under a pattern, outside an escape: the pattern's DFA, with `state` set
  // to where the string's characters so far stand in it (bytes >= 0x20 but '"' and '\' then fit
  // exactly when the DFA takes them); else null.
  RegexDfa* plain_string_pattern(int32_t& state) const {
    if (!pattern_ || !syntax_.in_plain_string()) return nullptr;
    state = pattern_state_;
    return pattern_;
  }

 private:
  // An open container the schema constrains: its node, the named properties seen (objects) and
  // the node of the value being read (an object's last key's, an array's items).
  struct Level {
    uint64_t seen = 0;      // objects: the named properties present; unique enum arrays: the strings
    uint32_t elements = 0;  // arrays: the elements begun
    uint16_t node = JsonSchema::kAny;
    uint16_t value = JsonSchema::kAny;
  };
  // The string being read, against a sorted list: an object's names or a string enum.
  enum class Match : uint8_t { kNone, kKey, kEnum, kUnknownKey };

  bool step(char byte);
  bool check(char byte, JsonObjectPrefix::Mode before, int depth_before, bool key_before);
  // The syntax is inside a number.
  static bool is_number_mode(JsonObjectPrefix::Mode m);
  // A byte of a bounded number: kept (at most kMaxChars); reachability is checked by advance.
  bool add_number_byte(char byte);
  // The bounded number so far can still end in its range (checked once per advance: a prefix of
  // a reachable text is reachable).
  bool number_reachable();
  bool begin_value(char byte, int depth_before);
  bool close_key(int depth);
  bool narrow(char byte, int depth);
  bool room_for_a_key(const Level& l) const;
  // The array at `l` takes each of its items' enum strings at most once (uniqueItems).
  bool unique_strings(const Level& l) const;
  void start_match(uint16_t node, size_t count, Match kind);
  // Whether some name i in [lo, hi) is not in `seen`.
  static bool unseen_name_in(uint64_t seen, size_t lo, size_t hi);
  const std::vector<std::string>& match_list() const;
  Level* level(int depth) { return depth >= 1 && depth <= kMaxSchemaDepth ? &levels_[depth - 1] : nullptr; }
  // The open container at `depth` (1: the outermost) is an array.
  bool syntax_in_array(int depth) const { return (syntax_.arrays_ >> (depth - 1)) & 1u; }

  JsonObjectPrefix syntax_;
  const JsonSchema* schema_ = nullptr;
  std::array<Level, kMaxSchemaDepth> levels_{};
  uint16_t match_node_ = JsonSchema::kAny;
  uint16_t match_lo_ = 0, match_hi_ = 0, match_len_ = 0;
  Match match_ = Match::kNone;
  bool integer_only_ = false;  // the number being read must stay an integer
  // A number with bounds is being read (number_node_, never kAny then, holds them): its
  // characters so far, checked against them at the end of each advance and in full when the
  // number ends.
  uint16_t number_node_ = JsonSchema::kAny;
  bool number_unchecked_ = false;
  uint8_t number_len_ = 0;
  std::array<char, JsonNumberRange::kMaxChars> number_{};
  // The string value being read: where its characters stand in its format (kNone: it has none).
  StringFormatCursor format_;
  // The string value being read has a pattern: its DFA (owned by the schema) and the state its
  // characters so far reached.
  RegexDfa* pattern_ = nullptr;
  int32_t pattern_state_ = RegexDfa::kDead;
  // The string value being read has length bounds: its characters so far and the bounds.
  bool bounded_string_ = false;
  uint32_t chars_ = 0, min_chars_ = 0, max_chars_ = UINT32_MAX;
};

}  // namespace dsv4
