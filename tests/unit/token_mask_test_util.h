// For the output-constraint tests (JSON, choice, regex): the token ids a mask allows.
#pragma once

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

}  // namespace dsv4::testing
