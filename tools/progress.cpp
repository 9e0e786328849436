// ProgressLine and megabytes.
#include "tools/progress.h"

#include <cstdio>

namespace dsv4::tools {

std::string megabytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

void ProgressLine::report(size_t tensors_done, size_t tensors_total, uint64_t bytes_done, uint64_t bytes_total) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::seconds(1)) return;
  last_ = now;
  std::fprintf(stderr, "%s: %zu/%zu tensors, %s/%s (%.0f%%)\n", who_.c_str(), tensors_done, tensors_total,
               megabytes(bytes_done).c_str(), megabytes(bytes_total).c_str(),
               bytes_total > 0 ? 100.0 * static_cast<double>(bytes_done) / static_cast<double>(bytes_total) : 100.0);
}

}  // namespace dsv4::tools
