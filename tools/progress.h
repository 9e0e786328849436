// Progress of long tool work (make-model's writes, loading a model's weights) as lines on stderr,
// at most one a second, so short runs print none.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dsv4::tools {

// "123.4 MB"
std::string megabytes(uint64_t bytes);

class ProgressLine {
 public:
  explicit ProgressLine(std::string who) : who_(std::move(who)), last_(std::chrono::steady_clock::now()) {}
  // "WHO: done/total tensors, X MB/Y MB (p%)", unless the last line (or the start) is under a
  // second ago.
  void report(size_t tensors_done, size_t tensors_total, uint64_t bytes_done, uint64_t bytes_total);

 private:
  std::string who_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace dsv4::tools
