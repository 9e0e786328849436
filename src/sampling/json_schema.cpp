// JSON Schema: the compiler from nlohmann JSON to nodes, and JsonSchemaPrefix, which watches
// JsonObjectPrefix's modes change byte by byte to see values, keys and containers begin and end.
#include "sampling/json_schema.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>

namespace dsv4 {

using nlohmann::ordered_json;

namespace {

bool needs_escape(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; });
}

uint8_t type_of_value(const ordered_json& v) {
  if (v.is_object()) return JsonSchema::kObject;
  if (v.is_array()) return JsonSchema::kArray;
  if (v.is_string()) return JsonSchema::kString;
  if (v.is_number()) return JsonSchema::kNumber;
  if (v.is_boolean()) return JsonSchema::kBoolean;
  return JsonSchema::kNull;
}

// A JSON pointer's token: '~' and '/' escaped.
std::string pointer_token(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

}  // namespace

class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(const ordered_json& document, JsonSchema& schema) : document_(document), schema_(schema) {}

  uint16_t compile(const ordered_json& s, const std::string& path) {
    // References chain without the document nesting: bound the recursion all the same.
    if (depth_ == kMaxDepth) throw JsonSchemaError(path, "the schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
    ++depth_;
    const uint16_t id = compile_at_depth(s, path);
    --depth_;
    return id;
  }

 private:
  static constexpr int kMaxDepth = 256;

  uint16_t compile_at_depth(const ordered_json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw JsonSchemaError(path, "false allows no value");
      return JsonSchema::kAny;
    }
    if (!s.is_object()) throw JsonSchemaError(path, "a schema must be an object or a boolean");
    if (const auto ref = s.find("$ref"); ref != s.end()) return resolve(*ref, path + "/$ref");
    const uint16_t id = reserve(path);
    JsonSchema::Node n;
    if (const auto type = s.find("type"); type != s.end()) restrict_types(n, *type, path + "/type");
    for (const char* key : {"anyOf", "oneOf"})
      if (const auto alternatives = s.find(key); alternatives != s.end()) join(n, *alternatives, path + "/" + key);
    bool properties_given = false;  // by allOf: this schema's own properties may not add to them
    if (const auto parts = s.find("allOf"); parts != s.end()) properties_given = meet(n, *parts, path + "/allOf");
    for (const char* key : {"enum", "const"})
      if (const auto values = s.find(key); values != s.end())
        restrict_values(n, std::string(key) == "const" ? ordered_json::array({*values}) : *values, path + "/" + key);
    if (const auto properties = s.find("properties"); properties != s.end()) {
      if (!properties->is_object()) throw JsonSchemaError(path + "/properties", "must be an object");
      if (properties_given)
        throw JsonSchemaError(path + "/properties", "properties beside an allOf part that has its own are not supported");
      std::vector<std::pair<std::string, uint16_t>> named;
      for (const auto& [name, sub] : properties->items()) {
        const std::string at = path + "/properties/" + pointer_token(name);
        if (needs_escape(name)) throw JsonSchemaError(at, "property names that need escaping are not supported");
        named.emplace_back(name, compile(sub, at));
      }
      set_names(n, std::move(named), path + "/properties");
    }
    if (const auto extra = s.find("additionalProperties"); extra != s.end()) {
      if (extra->is_boolean() && !extra->get<bool>()) n.closed = true;
      else n.additional = compile(*extra, path + "/additionalProperties");
    }
    if (const auto required = s.find("required"); required != s.end()) add_required(n, *required, path + "/required");
    array_items(n, s, path);
    // Bounds narrow what anyOf / oneOf gave.
    n.min_items = std::max(n.min_items, count_bound(s, "minItems", path, 0));
    n.max_items = std::min(n.max_items, count_bound(s, "maxItems", path, UINT32_MAX));
    if (n.min_items > n.max_items) throw JsonSchemaError(path + "/minItems", "is more than maxItems");
    if (const auto unique = s.find("uniqueItems"); unique != s.end()) {
      if (!unique->is_boolean()) throw JsonSchemaError(path + "/uniqueItems", "must be a boolean");
      n.unique_items = n.unique_items || unique->get<bool>();
    }
    n.min_length = std::max(n.min_length, count_bound(s, "minLength", path, 0));
    n.max_length = std::min(n.max_length, count_bound(s, "maxLength", path, UINT32_MAX));
    if (n.min_length > n.max_length) throw JsonSchemaError(path + "/minLength", "is more than maxLength");
    const auto compile_pattern = [&](std::string_view pattern, const std::string& at) {
      try {
        auto nfa = std::make_shared<const RegexNfa>(RegexNfa::compile(pattern));
        n.pattern = std::make_shared<RegexDfa>(std::move(nfa), JsonSchema::kMaxPatternStates);
      } catch (const UsageError& e) {
        throw JsonSchemaError(at, e.what());
      }
    };
    std::string_view format_pattern;  // a format checked as a pattern (email, ipv4, ...)
    if (const auto format = s.find("format"); format != s.end()) {
      if (!format->is_string()) throw JsonSchemaError(path + "/format", "must be a string");
      const std::string name = format->get<std::string>();
      if (const auto f = string_format_named(name)) n.format = *f;
      else if (const auto as_pattern = string_format_pattern(name)) format_pattern = *as_pattern;
      // other formats: not checked
    }
    if (const auto pattern = s.find("pattern"); pattern != s.end()) {
      if (!pattern->is_string()) throw JsonSchemaError(path + "/pattern", "must be a string");
      if (n.pattern)
        throw JsonSchemaError(path + "/pattern", "a pattern beside an allOf or anyOf part's pattern is not supported");
      compile_pattern(pattern->get<std::string>(), path + "/pattern");
    }
    // A format checked as a pattern is not checked beside another pattern, another format or
    // length bounds (as a format beside length bounds below).
    if (!format_pattern.empty() && !n.pattern && n.format == StringFormat::kNone && n.min_length == 0 &&
        n.max_length == UINT32_MAX) {
      compile_pattern(format_pattern, path + "/format");
      n.pattern_from_format = true;
    }
    if (n.pattern && (n.min_length > 0 || n.max_length != UINT32_MAX || n.format != StringFormat::kNone)) {
      if (!n.pattern_from_format)
        throw JsonSchemaError(path + "/pattern", "a pattern beside minLength, maxLength or format is not supported");
      n.pattern = nullptr;  // an allOf part's format: not checked
      n.pattern_from_format = false;
    }
    if (n.pattern && !n.strings.empty()) {  // enum strings that do not match cannot be written
      std::erase_if(n.strings, [&](const std::string& e) { return !n.pattern->nfa().full_match(e); });
      if (n.strings.empty()) n.types &= static_cast<uint8_t>(~JsonSchema::kString);
    }
    // A format beside length bounds is not checked (a bound could cut a time's fraction short of
    // its offset); an enum's strings that are not of the format cannot be written.
    if (n.min_length > 0 || n.max_length != UINT32_MAX) n.format = StringFormat::kNone;
    if (n.format != StringFormat::kNone && !n.strings.empty()) {
      std::erase_if(n.strings, [&](const std::string& e) {
        StringFormatCursor cursor(n.format);
        return !std::all_of(e.begin(), e.end(), [&](char c) { return cursor.advance(c); }) || !cursor.complete();
      });
      if (n.strings.empty()) n.types &= static_cast<uint8_t>(~JsonSchema::kString);
    }
    if (!n.strings.empty()) {  // enum strings outside the length bounds cannot be written
      std::erase_if(n.strings, [&](const std::string& e) {
        const auto chars = static_cast<uint32_t>(std::count_if(e.begin(), e.end(), begins_character));
        return chars < n.min_length || chars > n.max_length;
      });
      if (n.strings.empty()) n.types &= static_cast<uint8_t>(~JsonSchema::kString);
    }
    number_bounds(n, s, path);
    if (n.unique_items) {  // unique enum strings: no array longer than the enum
      const JsonSchema::Node& items = schema_.nodes_[n.items];
      if (items.types == JsonSchema::kString && !items.strings.empty() && items.strings.size() <= 64 &&
          n.min_items > items.strings.size())
        n.types &= static_cast<uint8_t>(~JsonSchema::kArray);
    }
    if (n.types == 0) throw JsonSchemaError(path, "the schema allows no value");
    schema_.nodes_[id] = std::move(n);
    return id;
  }

  uint16_t reserve(const std::string& path) {
    if (schema_.nodes_.size() > 65535) throw JsonSchemaError(path, "the schema has more than 65535 parts");
    schema_.nodes_.emplace_back();
    return static_cast<uint16_t>(schema_.nodes_.size() - 1);
  }

  // "#/$defs/Name" or "#/definitions/Name", compiled once (a recursive schema refers to a node
  // that is still being compiled).
  uint16_t resolve(const ordered_json& ref, const std::string& path) {
    if (!ref.is_string()) throw JsonSchemaError(path, "must be a string");
    const std::string target = ref.get<std::string>();
    if (const auto done = refs_.find(target); done != refs_.end()) return done->second;
    for (const std::string section : {"$defs", "definitions"}) {
      const std::string prefix = "#/" + section + "/";
      if (target.rfind(prefix, 0) != 0) continue;
      const std::string name = target.substr(prefix.size());
      const auto defs = document_.find(section);
      if (defs == document_.end() || !defs->is_object() || !defs->contains(name))
        throw JsonSchemaError(path, "\"" + target + "\" is not in the schema");
      const ordered_json& def = (*defs)[name];
      // Reserve the node first, so that a reference to it from inside resolves to it.
      const uint16_t id = reserve(path);
      refs_[target] = id;
      const uint16_t compiled = compile(def, "/" + section + "/" + pointer_token(name));
      schema_.nodes_[id] = schema_.nodes_[compiled];
      return id;
    }
    throw JsonSchemaError(path, "only references into \"#/$defs/\" or \"#/definitions/\" are supported, not \"" + target + "\"");
  }

  // minItems / maxItems: a non-negative integer (at most 2^32 - 1).
  static uint32_t count_bound(const ordered_json& s, const char* key, const std::string& path, uint32_t absent) {
    const auto it = s.find(key);
    if (it == s.end()) return absent;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > int64_t{UINT32_MAX})
      throw JsonSchemaError(path + "/" + key, "must be a non-negative integer");
    return static_cast<uint32_t>(it->get<int64_t>());
  }

  // An array's element schemas: prefixItems (or draft 7's items array) for a tuple's first
  // elements, then items (draft 7: additionalItems) for the rest; false there allows no more.
  void array_items(JsonSchema::Node& n, const ordered_json& s, const std::string& path) {
    const auto items = s.find("items");
    const auto tuple = s.find("prefixItems");
    const bool draft7_tuple = items != s.end() && items->is_array();
    const auto positions = tuple != s.end() ? tuple : draft7_tuple ? items : s.end();
    if (positions != s.end()) {
      const std::string at = path + (tuple != s.end() ? "/prefixItems" : "/items");
      if (!positions->is_array()) throw JsonSchemaError(at, "must be an array");
      n.prefix_items.clear();
      for (size_t i = 0; i < positions->size(); ++i) n.prefix_items.push_back(compile((*positions)[i], at + "/" + std::to_string(i)));
    }
    const auto rest = draft7_tuple ? s.find("additionalItems") : (items != s.end() ? items : s.end());
    if (rest == s.end()) return;
    const std::string at = path + (draft7_tuple ? "/additionalItems" : "/items");
    if (rest->is_boolean() && !rest->get<bool>()) {  // no element past the tuple's
      n.max_items = std::min(n.max_items, static_cast<uint32_t>(n.prefix_items.size()));
      return;
    }
    n.items = compile(*rest, at);
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum: numbers (exclusive* also draft 4's
  // booleans, which make minimum / maximum exclusive); multipleOf: an integer step (others are not
  // checked). They narrow what anyOf / oneOf gave; where no number meets them, the node allows no
  // number.
  static void number_bounds(JsonSchema::Node& n, const ordered_json& s, const std::string& path) {
    const auto number_at = [&](const char* key) -> std::optional<double> {
      const auto it = s.find(key);
      if (it == s.end() || it->is_boolean()) return std::nullopt;
      if (!it->is_number() || !std::isfinite(it->get<double>()))
        throw JsonSchemaError(path + "/" + key, "must be a number");
      return it->get<double>();
    };
    const auto flag = [&](const char* key) {
      const auto it = s.find(key);
      return it != s.end() && it->is_boolean() && it->get<bool>();
    };
    if (const auto v = number_at("minimum")) n.range.restrict_below(*v, flag("exclusiveMinimum"));
    if (const auto v = number_at("maximum")) n.range.restrict_above(*v, flag("exclusiveMaximum"));
    if (const auto v = number_at("exclusiveMinimum")) n.range.restrict_below(*v, true);
    if (const auto v = number_at("exclusiveMaximum")) n.range.restrict_above(*v, true);
    if (const auto step = number_at("multipleOf")) {
      if (!(*step > 0)) throw JsonSchemaError(path + "/multipleOf", "must be greater than 0");
      n.range.restrict_multiple_of(*step);  // a step that is not an integer is not checked
    }
    if (n.range.bounded() && !n.range.allows_some(n.integer_only)) n.types &= static_cast<uint8_t>(~JsonSchema::kNumber);
  }

  static void restrict_types(JsonSchema::Node& n, const ordered_json& type, const std::string& path) {
    const ordered_json names = type.is_array() ? type : ordered_json::array({type});
    uint8_t types = 0;
    bool integer = false, number = false;
    for (const ordered_json& t : names) {
      if (!t.is_string()) throw JsonSchemaError(path, "a type must be a string");
      const std::string name = t.get<std::string>();
      if (name == "object") types |= JsonSchema::kObject;
      else if (name == "array") types |= JsonSchema::kArray;
      else if (name == "string") types |= JsonSchema::kString;
      else if (name == "number") types |= JsonSchema::kNumber, number = true;
      else if (name == "integer") types |= JsonSchema::kNumber, integer = true;
      else if (name == "boolean") types |= JsonSchema::kBoolean;
      else if (name == "null") types |= JsonSchema::kNull;
      else throw JsonSchemaError(path, "unknown type \"" + name + "\"");
    }
    n.types &= types;
    n.integer_only = n.integer_only || (integer && !number);
  }

  // anyOf / oneOf: the alternatives' types; what an alternative says of a type is kept where it
  // is the only one allowing that type.
  void join(JsonSchema::Node& n, const ordered_json& alternatives, const std::string& path) {
    if (!alternatives.is_array() || alternatives.empty()) throw JsonSchemaError(path, "must be a non-empty array");
    uint8_t types = 0;
    std::array<int, 6> allowing{};
    std::array<uint16_t, 6> sole{};
    for (size_t i = 0; i < alternatives.size(); ++i) {
      const uint16_t id = compile(alternatives[i], path + "/" + std::to_string(i));
      const uint8_t t = schema_.nodes_[id].types;
      types |= t;
      for (int bit = 0; bit < 6; ++bit)
        if ((t >> bit) & 1) ++allowing[bit], sole[bit] = id;
    }
    n.types &= types;
    const auto only = [&](JsonSchema::Type type) -> const JsonSchema::Node* {
      const int bit = __builtin_ctz(type);
      return allowing[bit] == 1 ? &schema_.nodes_[sole[bit]] : nullptr;
    };
    if (const JsonSchema::Node* o = only(JsonSchema::kObject)) {
      n.names = o->names, n.property = o->property, n.required = o->required;
      n.closed = o->closed, n.additional = o->additional;
    }
    if (const JsonSchema::Node* a = only(JsonSchema::kArray)) {
      n.items = a->items;
      n.prefix_items = a->prefix_items;
      n.unique_items = n.unique_items || a->unique_items;
      n.min_items = std::max(n.min_items, a->min_items);
      n.max_items = std::min(n.max_items, a->max_items);
    }
    if (const JsonSchema::Node* s = only(JsonSchema::kString)) {
      n.strings = s->strings;
      n.format = s->format;
      n.pattern = s->pattern;
      n.pattern_from_format = s->pattern_from_format;
      n.min_length = std::max(n.min_length, s->min_length);
      n.max_length = std::min(n.max_length, s->max_length);
    }
    if (const JsonSchema::Node* num = only(JsonSchema::kNumber)) {
      n.integer_only = n.integer_only || num->integer_only;
      n.range.restrict_to(num->range);
    }
  }

  // allOf: every part's constraints at once. Types, integer-ness, numeric bounds, length and count
  // bounds and string enums intersect; an object's properties (names, required, closedness,
  // additional properties) and an array's items come from the one part that has them, since
  // merging two parts' property schemas is not supported (refused). Returns whether a part gave
  // properties. Pydantic's {"allOf": [{"$ref": ...}], "description": ...} is the common case.
  bool meet(JsonSchema::Node& n, const ordered_json& parts, const std::string& path) {
    if (!parts.is_array() || parts.empty()) throw JsonSchemaError(path, "must be a non-empty array");
    bool object_given = false, items_given = false;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string at = path + "/" + std::to_string(i);
      const JsonSchema::Node p = schema_.nodes_[compile(parts[i], at)];  // a copy: compiling moves the nodes
      n.types &= p.types;
      n.integer_only = n.integer_only || p.integer_only;
      n.range.restrict_to(p.range);
      n.min_items = std::max(n.min_items, p.min_items);
      n.max_items = std::min(n.max_items, p.max_items);
      n.unique_items = n.unique_items || p.unique_items;
      // Of two parts' patterns a format's yields (not checked); two written ones are refused.
      if (p.pattern && (!n.pattern || (n.pattern_from_format && !p.pattern_from_format))) {
        n.pattern = p.pattern;
        n.pattern_from_format = p.pattern_from_format;
      } else if (p.pattern && !p.pattern_from_format) {
        throw JsonSchemaError(at, "two allOf parts with patterns are not supported");
      }
      if (p.format != StringFormat::kNone) {
        if (n.format != StringFormat::kNone && n.format != p.format) n.types &= static_cast<uint8_t>(~JsonSchema::kString);
        n.format = p.format;
      }
      n.min_length = std::max(n.min_length, p.min_length);
      n.max_length = std::min(n.max_length, p.max_length);
      if (!p.strings.empty()) {
        if (n.strings.empty()) {
          n.strings = p.strings;
        } else {
          std::vector<std::string> both;
          std::set_intersection(n.strings.begin(), n.strings.end(), p.strings.begin(), p.strings.end(),
                                std::back_inserter(both));
          if (both.empty()) n.types &= static_cast<uint8_t>(~JsonSchema::kString);
          n.strings = std::move(both);
        }
      }
      if (!p.names.empty() || p.closed || p.additional != JsonSchema::kAny) {
        if (object_given) throw JsonSchemaError(at, "two allOf parts with properties of their own are not supported");
        object_given = true;
        n.names = p.names, n.property = p.property, n.required = p.required;
        n.closed = p.closed, n.additional = p.additional;
      }
      if (p.items != JsonSchema::kAny || !p.prefix_items.empty()) {
        if (items_given) throw JsonSchemaError(at, "two allOf parts with items of their own are not supported");
        items_given = true;
        n.items = p.items;
        n.prefix_items = p.prefix_items;
      }
    }
    if (n.min_items > n.max_items) throw JsonSchemaError(path, "its parts' minItems is more than their maxItems");
    if (n.min_length > n.max_length) throw JsonSchemaError(path, "its parts' minLength is more than their maxLength");
    if (n.range.bounded() && !n.range.allows_some(n.integer_only)) n.types &= static_cast<uint8_t>(~JsonSchema::kNumber);
    return object_given;
  }

  static void restrict_values(JsonSchema::Node& n, const ordered_json& values, const std::string& path) {
    if (!values.is_array()) throw JsonSchemaError(path, "must be an array");
    uint8_t types = 0;
    std::vector<std::string> strings;
    for (const ordered_json& v : values) {
      types |= type_of_value(v);
      if (!v.is_string()) continue;
      const std::string s = v.get<std::string>();
      if (needs_escape(s)) throw JsonSchemaError(path, "strings that need escaping are not supported");
      strings.push_back(s);
    }
    n.types &= types;
    std::sort(strings.begin(), strings.end());
    strings.erase(std::unique(strings.begin(), strings.end()), strings.end());
    if (!strings.empty()) n.strings = std::move(strings);
  }

  static void set_names(JsonSchema::Node& n, std::vector<std::pair<std::string, uint16_t>> named, const std::string& path) {
    if (named.size() > JsonSchema::kMaxProperties)
      throw JsonSchemaError(path, std::to_string(named.size()) + " properties, more than the " +
                                      std::to_string(JsonSchema::kMaxProperties) + " supported");
    std::sort(named.begin(), named.end());
    n.names.clear();
    n.property.clear();
    for (auto& [name, id] : named) n.names.push_back(std::move(name)), n.property.push_back(id);
  }

  // required: names of `properties` get their bit; others (where additionalProperties allows
  // them) join the names with the additional properties' node, so that their presence is tracked.
  static void add_required(JsonSchema::Node& n, const ordered_json& required, const std::string& path) {
    if (!required.is_array()) throw JsonSchemaError(path, "must be an array of names");
    std::vector<std::string> wanted;
    std::vector<std::pair<std::string, uint16_t>> named;
    for (size_t i = 0; i < n.names.size(); ++i) named.emplace_back(n.names[i], n.property[i]);
    for (const ordered_json& r : required) {
      if (!r.is_string()) throw JsonSchemaError(path, "must be an array of names");
      const std::string name = r.get<std::string>();
      wanted.push_back(name);
      if (std::binary_search(n.names.begin(), n.names.end(), name)) continue;
      if (n.closed)
        throw JsonSchemaError(path, "\"" + name + "\" is required, but additionalProperties is false and properties lack it");
      if (needs_escape(name)) throw JsonSchemaError(path, "property names that need escaping are not supported");
      if (std::none_of(named.begin(), named.end(), [&](const auto& p) { return p.first == name; }))
        named.emplace_back(name, n.additional);
    }
    set_names(n, std::move(named), path);
    for (const std::string& name : wanted)
      n.required |= uint64_t{1} << (std::lower_bound(n.names.begin(), n.names.end(), name) - n.names.begin());
  }

  const ordered_json& document_;
  JsonSchema& schema_;
  std::map<std::string, uint16_t> refs_;
  int depth_ = 0;
};

std::shared_ptr<const JsonSchema> JsonSchema::compile(const ordered_json& schema) {
  auto compiled = std::make_shared<JsonSchema>();
  compiled->nodes_.emplace_back();  // kAny
  JsonSchemaCompiler compiler(schema, *compiled);
  compiled->root_ = compiler.compile(schema, "");
  if (!(compiled->nodes_[compiled->root_].types & kObject))
    throw JsonSchemaError("", "the root must allow an object (the answer is one JSON object)");
  return compiled;
}

bool JsonSchemaPrefix::advance(char byte) {
  JsonSchemaPrefix next = *this;
  if (!next.step(byte) || (next.number_unchecked_ && !next.number_reachable())) return false;
  *this = next;
  return true;
}

bool JsonSchemaPrefix::advance(std::string_view bytes) {
  for (char byte : bytes)
    if (!step(byte)) return false;
  return !number_unchecked_ || number_reachable();
}

bool JsonSchemaPrefix::is_number_mode(JsonObjectPrefix::Mode m) {
  using Mode = JsonObjectPrefix::Mode;
  return m == Mode::kMinus || m == Mode::kZero || m == Mode::kInteger || m == Mode::kDot || m == Mode::kFraction ||
         m == Mode::kExponent || m == Mode::kExponentSign || m == Mode::kExponentDigits;
}

bool JsonSchemaPrefix::add_number_byte(char byte) {
  if (byte == 'e' || byte == 'E' || (byte == '.' && integer_only_) || number_len_ == number_.size()) return false;
  number_[number_len_++] = byte;
  number_unchecked_ = true;
  return true;
}

bool JsonSchemaPrefix::number_reachable() {
  number_unchecked_ = false;
  return schema_->node(number_node_).range.reachable(std::string_view(number_.data(), number_len_), integer_only_);
}

bool JsonSchemaPrefix::step(char byte) {
  using Mode = JsonObjectPrefix::Mode;
  const Mode before = syntax_.mode_;
  const int depth_before = syntax_.depth_;
  const bool key_before = syntax_.key_;
  if (!syntax_.step(byte)) return false;
  return schema_ == nullptr || check(byte, before, depth_before, key_before);
}

// The schema's view of a byte the syntax took.
bool JsonSchemaPrefix::check(char byte, JsonObjectPrefix::Mode before, int depth_before, bool key_before) {
  using Mode = JsonObjectPrefix::Mode;
  const Mode after = syntax_.mode_;
  const int depth_after = syntax_.depth_;
  if (before == Mode::kString) {
    if (byte == '"') {
      const bool enum_ok = match_ != Match::kEnum || match_list()[match_lo_].size() == match_len_;
      if (key_before) return close_key(depth_before);
      if (match_ == Match::kEnum && enum_ok) {  // an array's unique strings: each once
        Level* l = level(depth_before);
        if (l && syntax_in_array(depth_before) && unique_strings(*l)) {
          const uint64_t bit = uint64_t{1} << match_lo_;
          if (l->seen & bit) return false;
          l->seen |= bit;
        }
      }
      match_ = Match::kNone;
      const bool long_enough = !bounded_string_ || chars_ >= min_chars_;
      bounded_string_ = false;
      const bool formatted = format_.complete();
      format_ = StringFormatCursor();
      const bool matched = !pattern_ || pattern_->is_match(pattern_state_);
      pattern_ = nullptr;
      return enum_ok && long_enough && formatted && matched;
    }
    if (format_.active() && !key_before && (after == Mode::kEscape || !format_.advance(byte))) return false;
    if (pattern_ && !key_before) {
      if (after == Mode::kEscape) return false;
      pattern_state_ = pattern_->step(pattern_state_, static_cast<uint8_t>(byte));
      if (pattern_state_ == RegexDfa::kDead) return false;
    }
    // A character starts at any byte but a UTF-8 continuation; an escape's '\' starts one (a
    // surrogate pair's second escape is read in other modes and adds none).
    if (bounded_string_ && !key_before && begins_character(byte) && ++chars_ > max_chars_)
      return false;
    if (after == Mode::kEscape) return match_ == Match::kNone || match_ == Match::kUnknownKey;
    return narrow(byte, depth_before);
  }
  if (number_node_ != JsonSchema::kAny) {  // the previous byte was part of a bounded number
    if (is_number_mode(after)) return add_number_byte(byte);
    // This byte ends it: the whole number must lie in the range.
    const uint16_t node = number_node_;
    number_node_ = JsonSchema::kAny;
    number_unchecked_ = false;
    if (!schema_->node(node).range.contains(std::string_view(number_.data(), number_len_))) return false;
  }
  const bool whitespace = byte == ' ' || byte == '\t' || byte == '\n' || byte == '\r';
  if (whitespace) return true;
  if ((before == Mode::kStart || before == Mode::kValue || before == Mode::kValueOrArrayEnd) &&
      !(before == Mode::kValueOrArrayEnd && byte == ']'))
    return begin_value(byte, depth_before);
  if ((before == Mode::kKeyOrObjectEnd || before == Mode::kKey) && byte == '"') {
    const Level* l = level(depth_before);
    if (!l) return true;
    const JsonSchema::Node& node = schema_->node(l->node);
    start_match(l->node, node.names.size(), node.names.empty() ? Match::kUnknownKey : Match::kKey);
    return room_for_a_key(*l);
  }
  if ((after == Mode::kDot || after == Mode::kExponent) && integer_only_) return false;
  if (depth_after < depth_before && byte == '}') {
    const Level* l = level(depth_before);
    return !l || (l->seen & schema_->node(l->node).required) == schema_->node(l->node).required;
  }
  if (depth_after < depth_before && byte == ']') {
    const Level* l = level(depth_before);
    return !l || l->elements >= schema_->node(l->node).min_items;
  }
  if (byte == ',' && after == Mode::kValue) {  // another element must fit
    const Level* l = level(depth_after);
    if (!l) return true;
    const JsonSchema::Node& node = schema_->node(l->node);
    return l->elements < node.max_items &&
           (!unique_strings(*l) || unseen_name_in(l->seen, 0, schema_->node(node.items).strings.size()));
  }
  if (byte == ',' && after == Mode::kKey) {
    const Level* l = level(depth_after);
    return !l || room_for_a_key(*l);
  }
  return true;
}

bool JsonSchemaPrefix::unique_strings(const Level& l) const {
  const JsonSchema::Node& node = schema_->node(l.node);
  if (!node.unique_items) return false;
  const JsonSchema::Node& items = schema_->node(node.items);
  return items.types == JsonSchema::kString && !items.strings.empty() && items.strings.size() <= 64;
}

// Whether the object at `l` can take another key: it is open to other names, or a named one is
// still missing.
bool JsonSchemaPrefix::room_for_a_key(const Level& l) const {
  const JsonSchema::Node& node = schema_->node(l.node);
  return !node.closed || unseen_name_in(l.seen, 0, node.names.size());
}

// Begins matching the string being read against the first `count` names of `node`'s list (its
// property names for kKey, its enum strings for kEnum).
void JsonSchemaPrefix::start_match(uint16_t node, size_t count, Match kind) {
  match_node_ = node;
  match_lo_ = 0;
  match_hi_ = static_cast<uint16_t>(count);
  match_len_ = 0;
  match_ = kind;
}

// The first byte of a value: its type must be one the node allows.
bool JsonSchemaPrefix::begin_value(char byte, int depth_before) {
  uint16_t id = schema_->root();
  if (depth_before > 0) {
    Level* l = level(depth_before);
    id = l ? l->value : JsonSchema::kAny;
    if (l && syntax_in_array(depth_before)) {
      const JsonSchema::Node& array = schema_->node(l->node);
      if (l->elements < array.prefix_items.size()) id = array.prefix_items[l->elements];  // a tuple's position
      if (++l->elements > array.max_items) return false;
    }
  }
  const JsonSchema::Node& node = schema_->node(id);
  uint8_t type = JsonSchema::kNumber;
  switch (byte) {
    case '{': type = JsonSchema::kObject; break;
    case '[': type = JsonSchema::kArray; break;
    case '"': type = JsonSchema::kString; break;
    case 't': case 'f': type = JsonSchema::kBoolean; break;
    case 'n': type = JsonSchema::kNull; break;
    default: break;
  }
  if (!(node.types & type)) return false;
  integer_only_ = type == JsonSchema::kNumber && node.integer_only;
  if (type == JsonSchema::kNumber && node.range.bounded()) {
    number_node_ = id;
    number_len_ = 0;
    return add_number_byte(byte);
  }
  if (type == JsonSchema::kObject || type == JsonSchema::kArray) {
    if (Level* l = level(depth_before + 1)) *l = {0, 0, id, type == JsonSchema::kArray ? node.items : JsonSchema::kAny};
  } else if (type == JsonSchema::kString) {
    if (!node.strings.empty()) start_match(id, node.strings.size(), Match::kEnum);
    format_ = StringFormatCursor(node.strings.empty() ? node.format : StringFormat::kNone);
    pattern_ = node.strings.empty() ? node.pattern.get() : nullptr;
    if (pattern_) pattern_state_ = pattern_->start();
    bounded_string_ = node.min_length > 0 || node.max_length != UINT32_MAX;
    chars_ = 0;
    min_chars_ = node.min_length;
    max_chars_ = node.max_length;
  }
  return true;
}

// A key's closing quote: a named property not seen before takes its node, any other name (where
// the object is not closed) the additional properties' node.
bool JsonSchemaPrefix::close_key(int depth) {
  const Match match = match_;
  match_ = Match::kNone;
  Level* l = level(depth);
  if (!l) return true;
  const JsonSchema::Node& node = schema_->node(l->node);
  if (match == Match::kKey && node.names[match_lo_].size() == match_len_) {
    const uint64_t bit = uint64_t{1} << match_lo_;
    if (l->seen & bit) return false;
    l->seen |= bit;
    l->value = node.property[match_lo_];
    return true;
  }
  if (node.closed) return false;
  l->value = node.additional;
  return true;
}

// A plain byte of a key or an enum string: the names that go on with it.
bool JsonSchemaPrefix::narrow(char byte, int depth) {
  if (match_ != Match::kKey && match_ != Match::kEnum) return true;
  const std::vector<std::string>& list = match_list();
  const size_t len = match_len_;
  const auto key = [len](const std::string& s) { return s.size() > len ? static_cast<int>(static_cast<unsigned char>(s[len])) : -1; };
  const int want = static_cast<unsigned char>(byte);
  const auto begin = list.begin() + match_lo_, end = list.begin() + match_hi_;
  const auto lo = std::partition_point(begin, end, [&](const std::string& s) { return key(s) < want; });
  const auto hi = std::partition_point(lo, end, [&](const std::string& s) { return key(s) == want; });
  if (lo != hi && match_ == Match::kKey) {
    const Level* l = level(depth);
    if (l && !unseen_name_in(l->seen, static_cast<size_t>(lo - list.begin()), static_cast<size_t>(hi - list.begin()))) {
      // Every name that goes on with this byte is present already: only a new name may follow.
      if (schema_->node(match_node_).closed) return false;
      match_ = Match::kUnknownKey;
      return true;
    }
  }
  if (lo != hi && match_ == Match::kEnum) {  // in an array of unique strings: one not present yet
    const Level* l = level(depth);
    if (l && syntax_in_array(depth) && unique_strings(*l) &&
        !unseen_name_in(l->seen, static_cast<size_t>(lo - list.begin()), static_cast<size_t>(hi - list.begin())))
      return false;
  }
  if (lo == hi) {
    if (match_ == Match::kEnum || schema_->node(match_node_).closed) return false;
    match_ = Match::kUnknownKey;
    return true;
  }
  match_lo_ = static_cast<uint16_t>(lo - list.begin());
  match_hi_ = static_cast<uint16_t>(hi - list.begin());
  ++match_len_;
  return true;
}

bool JsonSchemaPrefix::unseen_name_in(uint64_t seen, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; ++i)
    if (!((seen >> i) & 1)) return true;
  return false;
}

const std::vector<std::string>& JsonSchemaPrefix::match_list() const {
  const JsonSchema::Node& node = schema_->node(match_node_);
  return match_ == Match::kEnum ? node.strings : node.names;
}

}  // namespace dsv4
