// PCRE2 compilation (UTF + UCP, JIT when available) and matching for the Split pre-tokenizer.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <new>

#include "core/error.h"

namespace dsv4 {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

RegexSplit::RegexSplit(const std::string& pattern, bool literal, const std::string& where)
    : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits no PCRE2_UCP (which only changes what classes match).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            options, &error, &error_offset, nullptr));
  if (!code_) {
    throw FormatError(where + ": regex rejected at offset " + std::to_string(error_offset) +
                      ": " + pcre2_message(error));
  }
  // JIT is a speed-up only: without it (a PCRE2 built without JIT) pcre2_match interprets.
  pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
  pcre2_pattern_info(code_.get(), PCRE2_INFO_CAPTURECOUNT, &capture_count_);
}

bool RegexSplit::next_match(std::string_view text, size_t from, pcre2_match_data* match,
                            size_t& begin, size_t& end) const {
  const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                             from, PCRE2_NO_UTF_CHECK, match, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    throw Error("pre-tokenizer regex '" + pattern_ + "' failed on a " +
                std::to_string(text.size()) + "-byte piece: " + pcre2_message(rc));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> PreTokenizer::make_match_data()
    const {
  uint32_t pairs = 1;
  for (const auto& split : splits_) pairs = std::max(pairs, split.capture_count() + 1);
  pcre2_match_data* data = pcre2_match_data_create(pairs, nullptr);
  if (data == nullptr) throw std::bad_alloc();
  return {data, pcre2_match_data_free};
}

}  // namespace dsv4
