// draw_token and draw_row_logprobs: token_draw.h's draw and logprobs done sequentially on the
// host, the reference of the CUDA kernels and what the host sampler and the CPU backend run.
// Compiled with -ffp-contract=off (CMakeLists.txt): draw_weight's multiplies and adds must not be
// fused.
#include "sampling/token_draw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

namespace dsv4 {

namespace {

struct Candidate {
  uint32_t key;  // draw_order_key of the logit
  int32_t id;
  uint64_t weight;
};

// Whether a comes before b in the draw's order: larger logit, then lower id.
bool comes_before(const Candidate& a, const Candidate& b) { return a.key > b.key || (a.key == b.key && a.id < b.id); }

// The largest non-NaN value of x (-inf if none): the row's `top`.
float largest_logit(std::span<const float> x) {
  float top = -std::numeric_limits<float>::infinity();
  for (const float v : x)
    if (v > top) top = v;  // NaN never compares larger
  return top;
}

uint64_t total_weight(const std::vector<Candidate>& cs) {
  uint64_t total = 0;
  for (const Candidate& c : cs) total += c.weight;
  return total;
}

// The first k tokens of x in the draw's order (a heap of k keeps the last of them on top), with
// their weights, when all of them are kept: then they are also the first k kept tokens, top-k's
// choice, found without a weight for the rest of the row. Empty when one of them is not kept.
template <typename Weight>
std::vector<Candidate> first_k_if_all_kept(std::span<const float> x, size_t k, Weight weight) {
  std::vector<Candidate> heap;
  heap.reserve(k);
  for (size_t i = 0; i < k; ++i) heap.push_back({draw_order_key(x[i]), static_cast<int32_t>(i), 0});
  std::make_heap(heap.begin(), heap.end(), comes_before);
  for (size_t i = k; i < x.size(); ++i) {
    const Candidate c{draw_order_key(x[i]), static_cast<int32_t>(i), 0};
    if (comes_before(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), comes_before);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), comes_before);
    }
  }
  for (Candidate& c : heap)
    if ((c.weight = weight(static_cast<size_t>(c.id))) == 0) return {};
  return heap;
}

}  // namespace

RowLogprobs draw_row_logprobs(const float* x_data, int64_t cols, int32_t id, int32_t top_n) {
  const std::span<const float> x(x_data, static_cast<size_t>(cols));
  const float top = largest_logit(x);
  double log_normalizer = std::numeric_limits<double>::quiet_NaN();
  if (std::isfinite(top)) {
    DrawU128 sum;
    for (const float v : x)
      sum = draw_add_u128(sum, draw_logprob_term(static_cast<double>(v) - static_cast<double>(top)));
    log_normalizer = draw_log_normalizer(sum);
  }
  RowLogprobs out;
  const float chosen = x[static_cast<size_t>(id)];
  out.logprob = draw_logprob(chosen, top, log_normalizer);
  out.rank = 1 + static_cast<int32_t>(std::count_if(x.begin(), x.end(), [&](float v) { return v > chosen; }));
  std::vector<Candidate> listed;
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i])) listed.push_back({draw_order_key(x[i]), static_cast<int32_t>(i), 0});
  const size_t n = std::min(listed.size(), static_cast<size_t>(std::max(0, top_n)));
  std::partial_sort(listed.begin(), listed.begin() + static_cast<std::ptrdiff_t>(n), listed.end(), comes_before);
  for (size_t i = 0; i < n; ++i) {
    out.top_ids.push_back(listed[i].id);
    out.top_logprobs.push_back(draw_logprob(x[static_cast<size_t>(listed[i].id)], top, log_normalizer));
  }
  return out;
}

int32_t draw_token(const float* x_data, int64_t cols, const DrawRow& row) {
  const std::span<const float> x(x_data, static_cast<size_t>(cols));
  if (row.temperature == 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < x.size(); ++i)
      if (x[i] > x[best]) best = i;
    return static_cast<int32_t>(best);
  }
  const float top = largest_logit(x);
  if (!std::isfinite(top)) return -1;
  const double inv_t = draw_inverse_temperature(row.temperature);
  const uint64_t min_weight = draw_min_weight(row.min_p);
  auto weight = [&](size_t i) {
    const uint64_t w = draw_weight(x[i], top, inv_t);
    return w >= min_weight ? w : 0;
  };
  const bool top_k = row.top_k > 0 && static_cast<size_t>(row.top_k) < x.size();
  if (!top_k && !(row.top_p < 1.0f)) {  // no cut: the draw over the row's weights
    std::vector<uint64_t> w(x.size());
    uint64_t total = 0;
    for (size_t i = 0; i < x.size(); ++i) total += (w[i] = weight(i));
    if (total == 0) return -1;  // min_p above 1
    const uint64_t target = draw_target(row.seed, row.index, total);
    uint64_t running = 0;
    for (size_t i = 0; i < w.size(); ++i)
      if ((running += w[i]) > target) return static_cast<int32_t>(i);
    return -1;  // not reached: target < total
  }
  std::vector<Candidate> kept;
  if (top_k) kept = first_k_if_all_kept(x, static_cast<size_t>(row.top_k), weight);
  if (kept.empty()) {
    kept.reserve(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      if (const uint64_t w = weight(i); w != 0) kept.push_back({draw_order_key(x[i]), static_cast<int32_t>(i), w});
    if (kept.empty()) return -1;  // min_p above 1
  }
  auto at = [&kept](size_t i) { return kept.begin() + static_cast<std::ptrdiff_t>(i); };
  if (top_k && static_cast<size_t>(row.top_k) < kept.size()) {
    std::nth_element(kept.begin(), at(static_cast<size_t>(row.top_k) - 1), kept.end(), comes_before);
    kept.resize(static_cast<size_t>(row.top_k));
  }
  if (row.top_p < 1.0f) {
    // The shortest prefix in the draw's order reaching `need`: kept[0, sorted) is that order's
    // start, each round sorting the next candidates, so only what the prefix needs is sorted.
    const uint64_t need = top_p_need(row.top_p, total_weight(kept));
    constexpr size_t kFirstRound = 64;
    uint64_t mass = 0;
    size_t n = 0, sorted = 0;
    for (size_t want = std::min(kFirstRound, kept.size());; want = std::min(4 * want, kept.size())) {
      if (want < kept.size()) std::nth_element(at(sorted), at(want), kept.end(), comes_before);
      std::sort(at(sorted), at(want), comes_before);
      sorted = want;
      while (n < sorted && mass < need) mass += kept[n++].weight;
      if (mass >= need || sorted == kept.size()) break;
    }
    kept.resize(n);
  }
  std::sort(kept.begin(), kept.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  const uint64_t target = draw_target(row.seed, row.index, total_weight(kept));
  uint64_t running = 0;
  for (const Candidate& c : kept)
    if ((running += c.weight) > target) return c.id;
  return -1;  // not reached: target < total
}

}  // namespace dsv4
