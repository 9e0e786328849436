// Helpers of the engine tests: prompt ids from a seed, and everything a request's stream delivered.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace dsv4 {

inline std::vector<int32_t> ids(int64_t n, uint32_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& id : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((s >> 33) % 100000);
  }
  return out;
}

// Everything a stream delivered.
struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int32_t> ranks;
  std::vector<int32_t> top_ids;       // every token's top logprobs, one after the other
  std::vector<float> top_logprobs;
  std::string text;
  FinishReason finish = FinishReason::kError;
  OutputChunk last;
};

inline Result drain(RequestHandle& h) {
  Result r;
  while (!h.done()) {
    OutputChunk c = h.next();
    for (const GeneratedToken& t : c.tokens) {
      r.tokens.push_back(t.id);
      r.logprobs.push_back(t.logprob);
      r.ranks.push_back(t.rank);
      for (const TokenLogprob& top : t.top) {
        r.top_ids.push_back(top.id);
        r.top_logprobs.push_back(top.logprob);
      }
    }
    r.text += c.text;
    if (c.finish) {
      r.finish = *c.finish;
      r.last = std::move(c);
    }
  }
  return r;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace dsv4
