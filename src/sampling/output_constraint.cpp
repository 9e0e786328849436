// The three output constraints behind OutputConstraint: each wraps its prefix class, which keeps
// the text's state, and says when the text is complete and what a dead end means.
#include "sampling/output_constraint.h"

#include <utility>

#include "sampling/choice_prefix.h"
#include "sampling/regex_prefix.h"

namespace dsv4 {

namespace {

class JsonObjectConstraint final : public OutputConstraint {
 public:
  explicit JsonObjectConstraint(std::shared_ptr<const JsonSchema> schema)
      : schema_(std::move(schema)), prefix_(schema_.get()) {}

  size_t allowed_tokens(const JsonTokenMask& vocab, int32_t, bool, std::vector<uint8_t>& allowed) override {
    return vocab.allowed_tokens(prefix_, allowed);  // special tokens (end of sequence too) are never allowed
  }
  void advance(std::string_view bytes) override { prefix_.advance(bytes); }
  bool finished() override { return prefix_.complete(); }
  std::string_view dead_end_message() const override {
    return "no token of the vocabulary can continue the JSON object";
  }

 private:
  std::shared_ptr<const JsonSchema> schema_;  // what prefix_ checks against (null: any object)
  JsonSchemaPrefix prefix_;
};

class ChoiceConstraint final : public OutputConstraint {
 public:
  explicit ChoiceConstraint(std::shared_ptr<const std::vector<std::string>> choices) : prefix_(std::move(choices)) {}

  size_t allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed,
                        std::vector<uint8_t>& allowed) override {
    return prefix_.allowed_tokens(vocab, eos_id, eos_allowed, allowed);
  }
  void advance(std::string_view bytes) override { prefix_.advance(bytes); }
  bool finished() override { return prefix_.is_choice() && !prefix_.can_continue(); }
  std::string_view dead_end_message() const override {
    return "no token of the vocabulary can continue any of the choices";
  }

 private:
  ChoicePrefix prefix_;
};

class RegexConstraint final : public OutputConstraint {
 public:
  explicit RegexConstraint(std::shared_ptr<const RegexNfa> regex) : prefix_(std::move(regex)) {}

  size_t allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed,
                        std::vector<uint8_t>& allowed) override {
    return prefix_.allowed_tokens(vocab, eos_id, eos_allowed, allowed);
  }
  void advance(std::string_view bytes) override { prefix_.advance(bytes); }
  bool finished() override { return prefix_.is_match() && !prefix_.can_continue(); }
  std::string_view dead_end_message() const override {
    return "no token of the vocabulary can continue a match of the regex";
  }

 private:
  RegexPrefix prefix_;
};

}  // namespace

std::unique_ptr<OutputConstraint> OutputConstraint::json_object(std::shared_ptr<const JsonSchema> schema) {
  return std::make_unique<JsonObjectConstraint>(std::move(schema));
}

std::unique_ptr<OutputConstraint> OutputConstraint::choice(std::shared_ptr<const std::vector<std::string>> choices) {
  return std::make_unique<ChoiceConstraint>(std::move(choices));
}

std::unique_ptr<OutputConstraint> OutputConstraint::regex(std::shared_ptr<const RegexNfa> regex) {
  return std::make_unique<RegexConstraint>(std::move(regex));
}

}  // namespace dsv4
