// The guided_choice constraint (see choice_prefix.h).
#include "sampling/choice_prefix.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace dsv4 {

void ChoicePrefix::validate(const std::vector<std::string>& choices) {
  if (choices.empty()) throw UsageError("guided_choice: the list of choices is empty");
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i].empty()) throw UsageError("guided_choice: choice " + std::to_string(i) + " is an empty string");
}

ChoicePrefix::ChoicePrefix(std::shared_ptr<const std::vector<std::string>> choices) : choices_(std::move(choices)) {
  if (!choices_) throw UsageError("guided_choice: no list of choices");
  validate(*choices_);
}

bool ChoicePrefix::is_choice() const {
  return std::find(choices_->begin(), choices_->end(), text_) != choices_->end();
}

bool ChoicePrefix::can_continue() const {
  return std::any_of(choices_->begin(), choices_->end(),
                     [&](const std::string& c) { return c.size() > text_.size() && c.starts_with(text_); });
}

size_t ChoicePrefix::allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed,
                                    std::vector<uint8_t>& allowed) const {
  // What each choice the text begins still needs, sorted: the rests a token's bytes begin are
  // then a run that starts at the first rest not below those bytes, so one binary search per token.
  std::vector<std::string_view> rests;
  for (const std::string& c : *choices_)
    if (c.size() > text_.size() && c.starts_with(text_)) rests.push_back(std::string_view(c).substr(text_.size()));
  std::sort(rests.begin(), rests.end());
  std::array<bool, 256> first_byte{};  // a token whose first byte begins no rest is out at once
  for (const std::string_view rest : rests) first_byte[static_cast<uint8_t>(rest[0])] = true;
  allowed.assign(static_cast<size_t>(vocab.vocab_size()), 0);
  size_t count = 0;
  if (!rests.empty())
    for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
      const std::string_view bytes = vocab.bytes(id);
      if (bytes.empty() || !first_byte[static_cast<uint8_t>(bytes[0])]) continue;
      const auto first = std::lower_bound(rests.begin(), rests.end(), bytes);
      const bool fits = first != rests.end() && first->starts_with(bytes);
      allowed[static_cast<size_t>(id)] = fits;
      count += fits;
    }
  if (eos_allowed && is_choice() && eos_id >= 0 && eos_id < vocab.vocab_size() && !allowed[static_cast<size_t>(eos_id)]) {
    allowed[static_cast<size_t>(eos_id)] = 1;
    ++count;
  }
  return count;
}

}  // namespace dsv4
