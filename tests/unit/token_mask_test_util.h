// For the output-constraint tests (JSON, choice, regex): the token ids a mask allows.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dsv4::testing {

// The ids whose entry in `allowed` (one byte per token, as the constraints' allowed_tokens fill it)
// is not 0, ascending.
inline std::vector<int32_t> allowed_ids_of(const std::vector<uint8_t>& allowed) {
  std::vector<int32_t> ids;
  for (size_t id = 0; id < allowed.size(); ++id)
    if (allowed[id] != 0) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

// The ids `constraint` (a ChoicePrefix, RegexPrefix or OutputConstraint: allowed_tokens(vocab,
// eos, eos_allowed, allowed)) lets through next, with its returned count checked against them.
template <typename Constraint, typename Vocab>
std::vector<int32_t> allowed_ids(Constraint& constraint, const Vocab& vocab, int32_t eos, bool eos_allowed) {
  std::vector<uint8_t> allowed;
  const size_t count = constraint.allowed_tokens(vocab, eos, eos_allowed, allowed);
  const std::vector<int32_t> ids = allowed_ids_of(allowed);
  EXPECT_EQ(count, ids.size());
  return ids;
}

}  // namespace dsv4::testing
