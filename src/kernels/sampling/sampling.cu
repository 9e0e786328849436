// Sampling on the device. The logit edits: a thread per edit; the masks: a block per masked row;
// the logprobs: a block per row (exact sum, rank count, top tokens by the draw's radix select).
// The token draw: a block of 1,024
// threads per row runs sampling/token_draw.h's steps as passes over the row's logits (read from
// L2 after the first), each an exact integer reduction, a radix select or an ordered scan, so the
// ids are draw_token's whatever the split:
//   max -> count and total of the kept weights -> top-k cut (radix select by count over the
//   order key, then the ties in id order) -> top-p cut (the same by weight) -> the draw (the
//   first id whose running weight exceeds the target).
// A cut is (key, id): a token is in when its key is larger, or equal with an id no larger.
// Weights are recomputed from the logits in every pass rather than stored (a row's [V] u64 would
// be 1 MB of traffic per pass); the passes are few and the exp is ~25 double operations.
#include "kernels/sampling/sampling.h"

#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/launch.cuh"

namespace dsv4::kernels {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kDigits = 256;

struct SampleSmem {
  unsigned long long hist[kDigits];  // a radix pass's measure per digit
  uint64_t warp_values[kWarps];
  float warp_max[kWarps];
  int64_t warp_index[kWarps];
  uint32_t digit;
  uint64_t above;  // the measure of the tokens before the digit found
  int64_t found_id;
  uint64_t found_running;
  uint64_t warp_hi[kWarps];  // a 128-bit sum's partial words
  uint32_t listed_keys[kDrawMaxTopLogprobs];  // the top logprobs' tokens, in no order yet
  int32_t listed_ids[kDrawMaxTopLogprobs];
  int listed;
};

// What a pass needs to know of the row: the weights' parameters and the current cut.
struct RowDraw {
  const float* x;
  int64_t cols;
  float top;
  double inv_t;
  uint64_t min_weight;
  uint32_t cut_key;
  int64_t cut_id;
};

// Token i's weight when it is kept and not after the cut, else 0; its order key in `key`.
__device__ __forceinline__ uint64_t kept_weight(const RowDraw& d, int64_t i, uint32_t& key) {
  const float xi = d.x[i];
  key = draw_order_key(xi);
  if (key < d.cut_key || (key == d.cut_key && i > d.cut_id)) return 0;
  const uint64_t w = draw_weight(xi, d.top, d.inv_t);
  return w >= d.min_weight ? w : 0;
}

// Sum over the block (exact: integers); every thread gets it.
__device__ uint64_t block_sum_u64(uint64_t v, SampleSmem& s) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFullMask, v, off);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  __syncthreads();  // warp_values may still be read by a previous call
  if (lane == 0) s.warp_values[warp] = v;
  __syncthreads();
  uint64_t total = s.warp_values[lane];
  for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(kFullMask, total, off);
  return total;
}

// The exact 128-bit sum over the block; every thread gets it.
__device__ DrawU128 block_sum_u128(DrawU128 v, SampleSmem& s) {
  for (int off = 16; off > 0; off /= 2) {
    DrawU128 other;
    other.hi = __shfl_xor_sync(kFullMask, v.hi, off);
    other.lo = __shfl_xor_sync(kFullMask, v.lo, off);
    v = draw_add_u128(v, other);
  }
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  __syncthreads();  // the partials may still be read by a previous call
  if (lane == 0) {
    s.warp_hi[warp] = v.hi;
    s.warp_values[warp] = v.lo;
  }
  __syncthreads();
  DrawU128 total;
  total.hi = s.warp_hi[lane];
  total.lo = s.warp_values[lane];
  for (int off = 16; off > 0; off /= 2) {
    DrawU128 other;
    other.hi = __shfl_xor_sync(kFullMask, total.hi, off);
    other.lo = __shfl_xor_sync(kFullMask, total.lo, off);
    total = draw_add_u128(total, other);
  }
  return total;
}

// Whether candidate (value v, index i) beats (best_v, best_i) among non-NaN values: larger, or
// equal at a lower index; best_i < 0 is no candidate yet.
__device__ __forceinline__ bool argmax_beats(float v, int64_t i, float best_v, int64_t best_i) {
  return i >= 0 && (best_i < 0 || v > best_v || (v == best_v && i < best_i));
}

// The argmax of a left-to-right scan keeping the first strictly larger value; valid in thread 0.
__device__ int32_t block_argmax(const float* row, int64_t cols, SampleSmem& s) {
  float best_v = 0.0f;
  int64_t best_i = -1;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float v = row[i];
    if (!isnan(v) && argmax_beats(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    const float v = __shfl_xor_sync(kFullMask, best_v, off);
    const int64_t i = __shfl_xor_sync(kFullMask, best_i, off);
    if (argmax_beats(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  if (lane == 0) {
    s.warp_max[warp] = best_v;
    s.warp_index[warp] = best_i;
  }
  __syncthreads();
  for (int w = 1; w < kWarps; ++w)
    if (argmax_beats(s.warp_max[w], s.warp_index[w], best_v, best_i)) {
      best_v = s.warp_max[w];
      best_i = s.warp_index[w];
    }
  return isnan(row[0]) || best_i < 0 ? 0 : static_cast<int32_t>(best_i);
}

// The largest non-NaN value of the row (-inf if none); every thread gets it.
__device__ float block_max(const float* row, int64_t cols, SampleSmem& s) {
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) m = fmaxf(m, row[i]);  // fmaxf drops NaN
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, off));
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  if (lane == 0) s.warp_max[warp] = m;
  __syncthreads();
  m = s.warp_max[lane];
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, off));
  __syncthreads();  // warp_max is reused
  return m;
}

struct Reached {
  int64_t id;        // -1: the running measure never reached the need
  uint64_t running;  // the running measure there (inclusive)
};

// The first id, ascending, at which the running sum of measure(i) reaches `need` (>= 1), and that
// sum: the row in tiles of a block, a block-wide inclusive scan per tile, and a carry.
template <typename Measure>
__device__ Reached first_reaching(int64_t cols, uint64_t need, Measure measure, SampleSmem& s) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  __syncthreads();
  if (threadIdx.x == 0) s.found_id = -1;
  uint64_t carry = 0;
  for (int64_t base = 0; base < cols; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const uint64_t w = i < cols ? measure(i) : 0;
    uint64_t inclusive = w;
    for (int off = 1; off < 32; off *= 2) {
      const uint64_t t = __shfl_up_sync(kFullMask, inclusive, off);
      if (lane >= off) inclusive += t;
    }
    if (lane == 31) s.warp_values[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      uint64_t sums = s.warp_values[lane];
      for (int off = 1; off < 32; off *= 2) {
        const uint64_t t = __shfl_up_sync(kFullMask, sums, off);
        if (lane >= off) sums += t;
      }
      s.warp_values[lane] = sums;
    }
    __syncthreads();
    const uint64_t running = carry + (warp > 0 ? s.warp_values[warp - 1] : 0) + inclusive;
    if (w > 0 && running >= need && running - w < need) {  // the one crossing
      s.found_id = i;
      s.found_running = running;
    }
    carry += s.warp_values[kWarps - 1];
    __syncthreads();
    if (s.found_id >= 0) break;
  }
  return {s.found_id, s.found_running};
}

// The cut at which the running measure of the tokens in the draw's order (key descending, id
// ascending) reaches `need`: a radix select over the key a byte at a time (each pass a histogram
// of the measure by digit among the tokens whose higher bytes match), then the ties of that key
// in id order. member(i, key) gives token i's weight (0: not taken into account) and its key;
// the measure is 1 per token taken (kByCount: top-k, top logprobs) or its weight (top-p).
struct Cut {
  uint32_t key;
  int64_t id;        // -1: not found (a need above the measure's total)
  uint64_t running;  // the measure up to the cut (inclusive)
};

template <bool kByCount, typename Member>
__device__ Cut find_cut(int64_t cols, Member member, uint64_t need, SampleSmem& s) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  uint32_t prefix = 0, mask = 0;
  uint64_t above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();  // the previous pass's readers of hist and digit are done
    for (int b = static_cast<int>(threadIdx.x); b < kDigits; b += kThreads) s.hist[b] = 0;
    __syncthreads();
    for (int64_t base = 0; base < cols; base += kThreads) {
      const int64_t i = base + threadIdx.x;
      uint32_t key = 0;
      const uint64_t w = i < cols ? member(i, key) : 0;
      const bool counted = w != 0 && (key & mask) == prefix;
      const uint64_t m = counted ? (kByCount ? 1 : w) : 0;
      const uint32_t digit = counted ? (key >> shift) & 0xffu : kDigits;  // kDigits: nothing to add
      // The lanes of a warp with the same digit add up first, so a digit gets one atomic per warp.
      const unsigned peers = __match_any_sync(kFullMask, digit);
      uint64_t peer_sum = 0;
      for (int l = 0; l < 32; ++l) {
        const uint64_t other = __shfl_sync(kFullMask, m, l);
        if ((peers >> l) & 1u) peer_sum += other;
      }
      if (digit < kDigits && lane == __ffs(peers) - 1) atomicAdd(&s.hist[digit], static_cast<unsigned long long>(peer_sum));
    }
    __syncthreads();
    // Warp 0 finds the digit, highest first, at which the measure reaches need: lane l sums
    // digits 255 - 8l down to 248 - 8l, the lanes scan those sums, and the lane where need is
    // reached walks its eight.
    if (warp == 0) {
      uint64_t chunk = 0;
      for (int j = 0; j < 8; ++j) chunk += s.hist[255 - 8 * lane - j];
      uint64_t inclusive = chunk;
      for (int off = 1; off < 32; off *= 2) {
        const uint64_t t = __shfl_up_sync(kFullMask, inclusive, off);
        if (lane >= off) inclusive += t;
      }
      const unsigned reached = __ballot_sync(kFullMask, above + inclusive >= need);
      if (reached != 0 && lane == __ffs(reached) - 1) {
        uint64_t before = above + inclusive - chunk;
        int digit = 255 - 8 * lane;
        for (int j = 0; j < 8; ++j, --digit) {
          const uint64_t h = s.hist[digit];
          if (before + h >= need) break;
          before += h;
        }
        s.digit = static_cast<uint32_t>(digit);
        s.above = before;
      }
    }
    __syncthreads();
    prefix |= s.digit << shift;
    mask |= 0xffu << shift;
    above = s.above;
  }
  const Reached ties = first_reaching(
      cols, need - above,
      [&](int64_t i) -> uint64_t {
        uint32_t key = 0;
        const uint64_t w = member(i, key);
        return w != 0 && key == prefix ? (kByCount ? 1 : w) : 0;
      },
      s);
  return {prefix, ties.id, above + ties.running};
}

__global__ void edit_logits_kernel(EditLogitsKernelParams p) {
  pdl_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.count) return;
  const LogitEdit e = p.edits[i];
  if (e.row < 0 || e.row >= p.rows || e.id < 0 || e.id >= p.cols) return;
  float& v = p.x[static_cast<int64_t>(e.row) * p.cols + e.id];
  v = edited_logit(v, e);
}

__global__ void mask_logits_kernel(MaskLogitsKernelParams p) {
  pdl_wait();
  const int32_t row = p.mask_rows[blockIdx.x];
  if (row < 0 || row >= p.rows) return;
  const uint32_t* words = p.allowed + static_cast<int64_t>(blockIdx.x) * ((p.cols + 31) / 32);
  float* x = p.x + static_cast<int64_t>(row) * p.cols;
  for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x)
    if (((words[j / 32] >> (j % 32)) & 1u) == 0) x[j] = -INFINITY;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SampleRowsKernelParams p) {
  pdl_wait();
  __shared__ SampleSmem s;
  const DrawRow r = p.rows[blockIdx.x];
  const float* x = p.x + static_cast<int64_t>(blockIdx.x) * p.cols;
  if (r.temperature == 0.0f) {
    const int32_t id = block_argmax(x, p.cols, s);
    if (threadIdx.x == 0) p.out[blockIdx.x] = id;
    return;
  }
  const float top = block_max(x, p.cols, s);
  if (!isfinite(top)) {
    if (threadIdx.x == 0) p.out[blockIdx.x] = -1;
    return;
  }
  RowDraw d{x, p.cols, top, draw_inverse_temperature(r.temperature), draw_min_weight(r.min_p), 0, INT64_MAX};
  auto weight = [&](int64_t i) -> uint64_t {
    uint32_t key = 0;
    return kept_weight(d, i, key);
  };
  auto kept = [&](int64_t i, uint32_t& key) { return kept_weight(d, i, key); };
  uint64_t count = 0, total = 0;
  for (int64_t i = threadIdx.x; i < p.cols; i += kThreads) {
    const uint64_t w = weight(i);
    count += w != 0 ? 1 : 0;
    total += w;
  }
  count = block_sum_u64(count, s);
  total = block_sum_u64(total, s);
  int64_t id = -1;
  if (count > 0) {
    if (r.top_k > 0 && static_cast<uint64_t>(r.top_k) < count) {
      const Cut cut = find_cut<true>(p.cols, kept, static_cast<uint64_t>(r.top_k), s);
      d.cut_key = cut.key;
      d.cut_id = cut.id;
      total = 0;
      for (int64_t i = threadIdx.x; i < p.cols; i += kThreads) total += weight(i);
      total = block_sum_u64(total, s);
    }
    if (r.top_p < 1.0f) {
      const Cut cut = find_cut<false>(p.cols, kept, top_p_need(r.top_p, total), s);
      d.cut_key = cut.key;
      d.cut_id = cut.id;
      total = cut.running;
    }
    id = first_reaching(p.cols, draw_target(r.seed, r.index, total) + 1, weight, s).id;
  }
  if (threadIdx.x == 0) p.out[blockIdx.x] = static_cast<int32_t>(id);
}

// One row's logprobs (token_draw.h's draw_row_logprobs): the max, the exact sum of the terms, the
// chosen token's logprob and rank, then the top tokens by a radix select by count over the
// non-NaN tokens, gathered into shared memory and sorted by thread 0.
__global__ void __launch_bounds__(kThreads) row_logprobs_kernel(RowLogprobsKernelParams p) {
  pdl_wait();
  __shared__ SampleSmem s;
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.cols;
  const float top = block_max(x, p.cols, s);
  double log_normalizer = NAN;
  if (isfinite(top)) {
    DrawU128 sum;
    for (int64_t i = threadIdx.x; i < p.cols; i += kThreads)
      sum = draw_add_u128(sum, draw_logprob_term(draw_add(static_cast<double>(x[i]), -static_cast<double>(top))));
    log_normalizer = draw_log_normalizer(block_sum_u128(sum, s));
  }
  const int32_t id = p.ids[row];
  const bool in_row = id >= 0 && id < p.cols;  // a failed draw's -1 has no logprob
  const float chosen = in_row ? x[id] : draw_nan();
  uint64_t larger = 0, valid = 0;
  for (int64_t i = threadIdx.x; i < p.cols; i += kThreads) {
    larger += x[i] > chosen ? 1 : 0;
    valid += isnan(x[i]) ? 0 : 1;
  }
  larger = block_sum_u64(larger, s);
  valid = block_sum_u64(valid, s);
  // No top list beside a failed draw (the CPU's draw_row_logprobs needs a token).
  const int64_t n = !in_row ? 0
                            : min(min(static_cast<int64_t>(p.top_counts[row]), static_cast<int64_t>(valid)),
                                  min(p.top_width, static_cast<int64_t>(kDrawMaxTopLogprobs)));
  if (threadIdx.x == 0) {
    p.logprob[row] = draw_logprob(chosen, top, log_normalizer);
    p.rank[row] = in_row ? static_cast<int32_t>(1 + larger) : 0;
    s.listed = 0;
  }
  if (n > 0) {
    auto listed = [&](int64_t i, uint32_t& key) -> uint64_t {
      key = draw_order_key(x[i]);
      return isnan(x[i]) ? 0 : 1;
    };
    const Cut cut = find_cut<true>(p.cols, listed, static_cast<uint64_t>(n), s);
    for (int64_t i = threadIdx.x; i < p.cols; i += kThreads) {
      const uint32_t key = draw_order_key(x[i]);
      if (!isnan(x[i]) && (key > cut.key || (key == cut.key && i <= cut.id))) {
        const int slot = atomicAdd(&s.listed, 1);
        if (slot < kDrawMaxTopLogprobs) {
          s.listed_keys[slot] = key;
          s.listed_ids[slot] = static_cast<int32_t>(i);
        }
      }
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const int count = min(s.listed, kDrawMaxTopLogprobs);
  for (int a = 1; a < count; ++a)  // insertion sort: key descending, id ascending
    for (int b = a; b > 0; --b) {
      const bool before = s.listed_keys[b] > s.listed_keys[b - 1] ||
                          (s.listed_keys[b] == s.listed_keys[b - 1] && s.listed_ids[b] < s.listed_ids[b - 1]);
      if (!before) break;
      const uint32_t k = s.listed_keys[b];
      s.listed_keys[b] = s.listed_keys[b - 1];
      s.listed_keys[b - 1] = k;
      const int32_t id = s.listed_ids[b];
      s.listed_ids[b] = s.listed_ids[b - 1];
      s.listed_ids[b - 1] = id;
    }
  for (int64_t j = 0; j < p.top_width; ++j) {
    const bool filled = j < count;
    p.top_ids[row * p.top_width + j] = filled ? s.listed_ids[j] : -1;
    p.top_logprobs[row * p.top_width + j] = filled ? draw_logprob(x[s.listed_ids[j]], top, log_normalizer) : draw_nan();
  }
}

}  // namespace

void edit_logits(const EditLogitsKernelParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  constexpr int kEditThreads = 256;
  const int64_t blocks = (p.count + kEditThreads - 1) / kEditThreads;
  if (blocks > 2147483647) throw UsageError("edit_logits: " + std::to_string(p.count) + " edits in one launch");
  launch_pdl(edit_logits_kernel, static_cast<unsigned>(blocks), kEditThreads, 0, stream, p);
}

void mask_logits(const MaskLogitsKernelParams& p, cudaStream_t stream) {
  if (p.count == 0) return;
  if (p.count > 2147483647) throw UsageError("mask_logits: " + std::to_string(p.count) + " masks in one launch");
  launch_pdl(mask_logits_kernel, static_cast<unsigned>(p.count), 256, 0, stream, p);
}

void row_logprobs(const RowLogprobsKernelParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  if (p.rows > 2147483647) throw UsageError("row_logprobs: " + std::to_string(p.rows) + " rows in one launch");
  launch_pdl(row_logprobs_kernel, static_cast<unsigned>(p.rows), kThreads, 0, stream, p);
}

void sample_rows(const SampleRowsKernelParams& p, cudaStream_t stream) {
  if (p.rows_count == 0) return;
  if (p.rows_count > 2147483647)
    throw UsageError("sample_rows: " + std::to_string(p.rows_count) + " rows in one launch");
  launch_pdl(sample_rows_kernel, static_cast<unsigned>(p.rows_count), kThreads, 0, stream, p);
}

}  // namespace dsv4::kernels
