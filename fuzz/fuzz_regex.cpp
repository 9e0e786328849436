// libFuzzer entry point for the guided_regex pattern compiler (sampling/regex_nfa.h): the input's
// first line is a pattern, the rest a text. A pattern must compile or be refused with a UsageError;
// a compiled one must give the same verdicts on the text through its lazy DFA (RegexDfa, capped, as
// a JSON schema's pattern uses it) and through RegexPrefix as through the NFA itself, and
// RegexPrefix's token mask over a small vocabulary (walked, then cached) must be the NFA's;
// anything else (another exception, a crash, a disagreement) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "sampling/json_token_mask.h"
#include "sampling/regex_dfa.h"
#include "sampling/regex_nfa.h"
#include "sampling/regex_prefix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view pattern = input.substr(0, newline);
  const std::string_view text = newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  std::shared_ptr<const dsv4::RegexNfa> nfa;
  try {
    nfa = std::make_shared<const dsv4::RegexNfa>(dsv4::RegexNfa::compile(pattern));
  } catch (const dsv4::UsageError&) {
    return 0;
  }
  const bool matches = nfa->full_match(text);
  const int32_t start = nfa->start();
  dsv4::RegexDfa dfa(nfa, 64);
  dsv4::RegexPrefix prefix(nfa);
  int32_t state = dfa.start();
  bool capped = false;
  for (const char c : text) {
    const size_t before = dfa.size();
    state = dfa.step(state, static_cast<uint8_t>(c));
    capped = capped || (state == dsv4::RegexDfa::kDead && dfa.size() == before && before == 64);
  }
  // The mask after the text, walked and then from its cache, against stepping the NFA per token.
  static const std::vector<std::string> kVocabulary = {"", "a", "b", "ab", "ba", "aab", "1", "12", "-", " ", "x y",
                                                       "\xC3", "\xA9", "\xC3\xA9", "\xC3\xA9" "a", "\n", "\"", "\\"};
  static const dsv4::JsonTokenMask vocab(kVocabulary);
  prefix.advance(text);
  std::vector<int32_t> at_text = nfa->closure(std::span(&start, 1));
  for (const char c : text) at_text = nfa->step(at_text, static_cast<uint8_t>(c));
  for (int round = 0; round < 2; ++round) {
    std::vector<uint8_t> allowed;
    prefix.allowed_tokens(vocab, 0, true, allowed);
    for (size_t id = 0; id < kVocabulary.size(); ++id) {
      std::vector<int32_t> set = at_text;
      for (const char c : kVocabulary[id]) set = nfa->step(set, static_cast<uint8_t>(c));
      const bool want = id == 0 ? nfa->accepts(at_text) : !set.empty();
      if ((allowed[id] != 0) != want) {
        std::fprintf(stderr, "mask of token %zu differs in round %d: %d, want %d\n", id, round, allowed[id], want);
        std::abort();
      }
    }
  }
  if (prefix.is_match() != matches || (!capped && dfa.is_match(state) != matches)) {
    std::fprintf(stderr, "regex verdicts differ: NFA %d, prefix %d, DFA %d\n", matches, prefix.is_match(),
                 dfa.is_match(state));
    std::abort();
  }
  return 0;
}
