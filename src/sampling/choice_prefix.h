// The output constraint of vLLM's guided_choice (structured_outputs.choice): the text must be
// one of a list of strings. A token may come next when the text so far plus its bytes begins some
// choice, and the end of sequence when the text is a choice (so a choice that begins a longer one
// may end there or go on); the request ends once the text is a choice no other one continues.
// allowed_tokens() looks every vocabulary token up among the sorted rests of the choices the text
// still begins (a binary search each), on the host, once per constrained sequence and step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/json_token_mask.h"

namespace dsv4 {

class ChoicePrefix {
 public:
  // `choices` must not be empty and hold no empty string (UsageError naming the problem).
  explicit ChoicePrefix(std::shared_ptr<const std::vector<std::string>> choices);

  // Appends a drawn token's bytes (which allowed_tokens let through).
  void advance(std::string_view bytes) { text_ += bytes; }
  const std::string& text() const { return text_; }
  // Whether the text is one of the choices.
  bool is_choice() const;
  // Whether some choice is longer than the text and begins with it.
  bool can_continue() const;

  // Sets allowed (resized to vocab's size) to 1 for each token whose bytes keep the text the start
  // of a choice, and for `eos_id` when `eos_allowed` and the text is a choice; 0 for the others.
  // Returns how many are allowed.
  size_t allowed_tokens(const JsonTokenMask& vocab, int32_t eos_id, bool eos_allowed, std::vector<uint8_t>& allowed) const;

  // Checks a list of choices as the constructor does.
  static void validate(const std::vector<std::string>& choices);

 private:
  std::shared_ptr<const std::vector<std::string>> choices_;
  std::string text_;
};

}  // namespace dsv4
