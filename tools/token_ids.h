// Token id lists as the commands take them: comma-separated decimal ids ("1,2,3"), whitespace
// allowed around them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::tools {

// Throws UsageError naming `source` and the offending entry.
std::vector<int32_t> parse_token_ids(std::string_view text, const std::string& source);

}  // namespace dsv4::tools
