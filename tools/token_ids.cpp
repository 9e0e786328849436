// Parsing of comma-separated token id lists.
#include "tools/token_ids.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "core/error.h"

namespace dsv4::tools {

std::vector<int32_t> parse_token_ids(std::string_view text, const std::string& source) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::vector<int32_t> ids;
  for (size_t pos = 0, entry = 0; pos <= text.size(); ++entry) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view item = text.substr(pos, comma - pos);
    pos = comma + 1;
    while (!item.empty() && is_space(item.front())) item.remove_prefix(1);
    while (!item.empty() && is_space(item.back())) item.remove_suffix(1);
    const bool last = comma == text.size();
    if (item.empty() && last && entry > 0) break;  // a trailing comma
    int64_t v = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 0 ||
        v > std::numeric_limits<int32_t>::max())
      throw UsageError(source + ": entry " + std::to_string(entry) + " ('" + std::string(item) + "') is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

}  // namespace dsv4::tools
