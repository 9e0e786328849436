// The pre-tokenizer of a tokenizer.json: a Sequence of Split steps, each cutting every piece of
// the previous step at the matches of its regex and keeping both the matches and the text
// between them (behavior "Isolated"). The regexes are Oniguruma patterns in the file; PCRE2 with
// UTF, UCP and JIT runs them with the same meaning. Each piece is matched as a subject of its
// own, so a lookahead such as `\s+(?!\S)` sees the end of the piece, as in Hugging Face.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace dsv4 {

class RegexSplit {
 public:
  // `literal`: the pattern is a plain string (a Split "String" pattern), not a regex. Throws
  // FormatError naming `where` if PCRE2 rejects the pattern.
  RegexSplit(const std::string& pattern, bool literal, const std::string& where);

  // Calls on_piece(string_view) for each match and each non-empty stretch between matches of
  // `text`, in order. `text` must be valid UTF-8.
  template <typename OnPiece>
  void split(std::string_view text, pcre2_match_data* match, OnPiece&& on_piece) const;

  uint32_t capture_count() const { return capture_count_; }

 private:
  // Finds the next match, possibly empty, in text[from, ...); false when there is none. An
  // empty match yields no piece but still cuts the text around it (as Oniguruma's find_iter
  // does in Hugging Face).
  bool next_match(std::string_view text, size_t from, pcre2_match_data* match, size_t& begin,
                  size_t& end) const;

  static size_t next_char(std::string_view text, size_t pos) {
    do ++pos;
    while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
    return pos;
  }

  struct CodeFree {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
  };
  std::unique_ptr<pcre2_code, CodeFree> code_;
  std::string pattern_;
  uint32_t capture_count_ = 0;
};

template <typename OnPiece>
void RegexSplit::split(std::string_view text, pcre2_match_data* match, OnPiece&& on_piece) const {
  size_t done = 0;  // end of the text already handed out
  size_t from = 0;  // where the next search starts
  size_t begin = 0;
  size_t end = 0;
  while (from < text.size() && next_match(text, from, match, begin, end)) {
    if (begin > done) on_piece(text.substr(done, begin - done));
    if (end > begin) on_piece(text.substr(begin, end - begin));
    done = end;
    from = end > begin ? end : next_char(text, begin);
  }
  if (done < text.size()) on_piece(text.substr(done));
}

// The Split steps of a pre-tokenizer, applied in order.
class PreTokenizer {
 public:
  void add(RegexSplit split) { splits_.push_back(std::move(split)); }

  // Match data large enough for every step's pattern; one per thread.
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> make_match_data() const;

  // Calls on_piece(string_view) for each final piece of `text` (valid UTF-8), in order.
  template <typename OnPiece>
  void split(std::string_view text, pcre2_match_data* match, OnPiece&& on_piece) const {
    split_from(0, text, match, on_piece);
  }

 private:
  template <typename OnPiece>
  void split_from(size_t step, std::string_view text, pcre2_match_data* match,
                  OnPiece& on_piece) const {
    if (step == splits_.size()) {
      on_piece(text);
      return;
    }
    splits_[step].split(text, match, [&](std::string_view piece) {
      split_from(step + 1, piece, match, on_piece);
    });
  }

  std::vector<RegexSplit> splits_;
};

}  // namespace dsv4
