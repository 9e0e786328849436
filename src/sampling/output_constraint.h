// What a request's output must be, as the engine asks it at each step: which tokens may come next,
// the drawn token's bytes to move past, and whether the text is done. One interface over the JSON
// object (response_format json_object / json_schema, json_token_mask.h), the choice list
// (guided_choice, choice_prefix.h) and the regex (guided_regex, regex_prefix.h), so the engine
// holds one constraint per request and treats the three alike.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/json_schema.h"
#include "sampling/json_token_mask.h"
#include "sampling/regex_nfa.h"

namespace dsv4 {

class OutputConstraint {
 public:
  // One JSON object that `schema` accepts (null: any object); the end of sequence is never
  // allowed, the text ends when the object closes.
  static std::unique_ptr<OutputConstraint> json_object(std::shared_ptr<const JsonSchema> schema);
  // One of `choices` (not empty, none empty: UsageError otherwise).
  static std::unique_ptr<OutputConstraint> choice(std::shared_ptr<const std::vector<std::string>> choices);
  // A whole match of `regex` (not null: UsageError otherwise).
  static std::unique_ptr<OutputConstraint> regex(std::shared_ptr<const RegexNfa> regex);

  virtual ~OutputConstraint() = default;

  // Sets allowed (resized to vocab's size) to 1 for each token that may come next and 0 for the
  // others; `eos_id` is allowed when `eos_allowed` and the constraint lets the text end here.
  // Returns how many are allowed (0: the text is at a dead end, dead_end_message() says which).
  // `vocab` is the same vocabulary for the constraint's whole life.
  virtual size_t allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed,
                                std::vector<uint8_t>& allowed) = 0;
  // Moves past a drawn token's bytes (which allowed_tokens let through).
  virtual void advance(std::string_view bytes) = 0;
  // The text is complete: nothing may follow it (the request ends with it). Not const: a regex
  // fills its DFA's transition cache.
  virtual bool finished() = 0;
  // Why a request ends when allowed_tokens allows nothing, for the client.
  virtual std::string_view dead_end_message() const = 0;
};

}  // namespace dsv4
